"""``agentctl`` commands that read stored histories: replay, fork, audit."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import typer
from temporalio.client import Client

from workers.cli.base import (
    EXIT_OK,
    EXIT_RUN_NOT_COMPLETED,
    EXIT_USAGE,
    _exit_for,
    _print_line,
    _print_result,
    _runtime_converter,
    _with_client,
    app,
    err,
    out,
    web_ui_url,
)

R = TypeVar("R")


def _from_run_or_file(
    run_id: str | None,
    file: str | None,
    from_run: Callable[[Client, str], Awaitable[R]],
    from_file: Callable[[str], R],
) -> R:
    """``from_run(client, run_id)`` or ``from_file(file)``, whichever of the two was given.

    Raises:
        typer.Exit: both or neither given, or the file cannot be read (EXIT_USAGE); the errors
            of :func:`_with_client` for a run.
    """
    if (run_id is None) == (file is None):
        err.print("error: give either RUN_ID or --file PATH")
        raise typer.Exit(EXIT_USAGE)
    if file is not None:
        try:
            return from_file(file)
        except (OSError, ValueError) as e:
            err.print(f"error: {e}", markup=False, highlight=False)
            raise typer.Exit(EXIT_USAGE) from None
    rid = run_id
    assert rid is not None
    return _with_client(lambda c: from_run(c, rid))


@app.command("replay")
def replay_cmd(
    run_id: str | None = typer.Argument(None, help="the run to replay (its whole chain)"),
    file: str | None = typer.Option(None, "--file", help="replay a stored JSON history instead"),
    as_json: bool = typer.Option(False, "--json", help="print only the ReplayReport JSON"),
) -> None:
    """Replay a run's history with the current workflow code (exit 0 compatible, 1 not)."""
    from workers import history as ih

    report = _from_run_or_file(
        run_id,
        file,
        lambda c, rid: ih.replay(c, rid),
        lambda path: asyncio.run(ih.replay_file(path, data_converter=_runtime_converter())),
    )
    label = run_id if file is None else f"{report.workflow_id} from {file}"
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

    def audit_file(path: str) -> Any:
        history = ih.load_history_file(path)
        return ih.audit(asyncio.run(ih.inline_payloads(history, _runtime_converter())))

    report = _from_run_or_file(run_id, file, lambda c, rid: ih.audit_run(c, rid), audit_file)
    if as_json:
        sys.stdout.write(report.model_dump_json() + "\n")
    else:
        sys.stdout.write(ih.render_audit_text(report))
