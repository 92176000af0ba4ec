"""``python -m workers.testing.scripted_model``: a stand-alone scripted model server for manual tries."""

from __future__ import annotations

import threading

import typer

from workers.cli.entrypoints import run_command
from workers.testing.scripted_model import ScriptedModel
from workers.testing.scripted_replies import _always, call_tool_then_answer, text


def _stand_alone(
    host: str = typer.Option("127.0.0.1", help="interface to bind"),
    port: int = typer.Option(8111, help="TCP port, 0 for any free one"),
    latency: float = typer.Option(0.0, help="seconds before each answer"),
    model: str = typer.Option("scripted", help="model id to report"),
    tool: str | None = typer.Option(
        None, help="tool to call once per conversation before answering"
    ),
    arguments: str = typer.Option("{}", help="the tool call's arguments, JSON"),
    answer: str = typer.Option("done", help="the final text answer"),
) -> None:
    """A scripted OpenAI-compatible chat-completions server for manual tries."""
    responder = call_tool_then_answer(tool, arguments, answer) if tool else _always(text(answer))
    server = ScriptedModel(responder=responder, latency=latency, model=model, host=host, port=port)
    try:
        server.start()
    except RuntimeError as exc:
        print(f"error: {exc}")
        raise typer.Exit(1) from None
    print(
        f"ScriptedModel serving model {model!r} at {server.base_url} (Ctrl-C to stop)", flush=True
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print(f"stopped after {server.count} requests", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Serve a simple responder until interrupted (Ctrl-C); returns the exit status.

    Without ``--tool`` every request is answered with ``--answer``; with it each conversation
    calls that tool once (arguments from ``--arguments``) and then answers. Options are parsed
    by typer (``--help`` lists them); a usage error returns 2.
    """
    return run_command(_stand_alone, argv, "python -m workers.testing.scripted_model")
