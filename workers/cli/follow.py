"""Printing a run live from its event stream: ``agentctl follow`` and ``agentctl run --follow``.

Text is written as the model writes it (``text_delta``), tool calls as they start and end, and an
approval request with the commands that answer it. The events come from
:func:`workers.live_reader.run_events` (the workers' live channels, else the run's stream); a
dropped connection is resumed from the last offset seen (and the step's characters already shown).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import typer
from rich.console import Console
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from workers import client as rc
from workers.config import Settings, load_settings
from workflows.models import RunResult

RECONNECTS = 5
"""Reconnections tried after a dropped stream before giving up."""


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


class EventPrinter:
    """Renders events on a rich console; keeps track of whether a text line is open.

    Args:
        console: where to print.
        run_id: the run (named in the approve/reject commands it prints).
        principal: who the printed commands act as.
    """

    def __init__(self, console: Console, run_id: str, principal: str = "anonymous") -> None:
        self.console = console
        self.run_id = run_id
        self.principal = principal
        self._open = False
        self._finished: set[str] = set()  # calls whose result was printed

    def _line(self, markup: str) -> None:
        if self._open:
            self.console.file.write("\n")
            self._open = False
        self.console.print(markup, highlight=False)

    def _plain(self, text: str) -> None:
        if self._open:
            self.console.file.write("\n")
            self._open = False
        self.console.print(text, highlight=False, markup=False)

    def show(self, ev: dict[str, Any]) -> None:
        """Print one event (unknown types are ignored)."""
        kind, turn = ev.get("type"), ev.get("turn", 0)
        if kind == "text_delta":
            self.console.file.write(ev.get("delta", ""))
            self.console.file.flush()
            self._open = True
        elif kind == "run_started":
            self._line(f"[dim]run started: agent {ev.get('agent')}[/dim]")
        elif kind == "status":
            self._line(f"[dim]turn {turn} status[/dim] [bold]{ev.get('status')}[/bold]")
            if ev.get("status") == "guardrail_paused":
                self._plain(f"  go on with: agentctl resume {self.run_id} -p {self.principal}")
                self._plain(f"  end with:   agentctl interrupt {self.run_id} -p {self.principal}")
        elif kind == "guardrail_tripped":
            call = f" of {ev['tool_call_id']}" if ev.get("tool_call_id") else ""
            self._plain(
                f"  guardrail {ev.get('guardrail')} tripped on {ev.get('stage')}{call}: "
                f"{ev.get('action')} ({ev.get('detail')})"
            )
        elif kind == "model_started":
            self._line(f"[dim]turn {turn}: {ev.get('model')} is writing...[/dim]")
        elif kind == "model_retry":
            self._line(
                f"[yellow]model retry (attempt {ev.get('attempt')}): {ev.get('error')}; "
                "the text above is void[/yellow]"
            )
        elif kind == "model_finished":
            usage = ev.get("usage") or {}
            self._line(f"[dim]({usage.get('total_tokens', 0)} tokens)[/dim]")
        elif kind == "tool_started":
            self._plain(f"  tool {ev.get('name')}({_short(ev.get('arguments'))}) ...")
        elif kind == "tool_finished" and not self._printed_already(ev):
            self._plain(
                f"  tool {ev.get('name')} -> {ev.get('status')} "
                f"[{float(ev.get('duration_ms') or 0):.0f} ms] {_short(ev.get('result', ''), 120)}"
            )
        elif kind == "approval_requested":
            self._approval(ev)
        elif kind == "client_tool_requested":
            self._line(
                f"[yellow]waiting for the client[/yellow] {ev.get('tool_call_id')}: "
                f"{ev.get('name')} {_short(ev.get('arguments'))} "
                "(agentctl tool-result RUN_ID CALL_ID --content TEXT)"
            )
        elif kind == "approval_decided":
            self._plain(
                f"  {ev.get('decision')} by {ev.get('principal_id')}: {ev.get('tool_call_id')}"
            )
        elif kind == "run_finished":
            result = ev.get("result") or {}
            self._line(f"[bold]run finished:[/bold] {result.get('status')}")

    def _printed_already(self, ev: dict[str, Any]) -> bool:
        """A call's result is printed once (a held call's comes live, and again after a reconnect)."""
        call = str(ev.get("tool_call_id"))
        seen = call in self._finished
        self._finished.add(call)
        return seen

    def _approval(self, ev: dict[str, Any]) -> None:
        cid = ev.get("tool_call_id")
        self._line(
            f"[yellow]waiting for approval[/yellow] {cid}: {ev.get('name')} "
            f"{_short(ev.get('arguments'))}"
        )
        self._plain(f"  approve with: agentctl approve {self.run_id} {cid} -p {self.principal}")
        self._plain(
            f"  reject with:  agentctl reject {self.run_id} {cid} -p {self.principal} "
            "--reason '...'"
        )


async def _ask(client: Client, printer: EventPrinter, ev: dict[str, Any]) -> None:
    """On a terminal: approve or reject the call now (through ``decide``), or skip."""
    answer = await asyncio.to_thread(typer.prompt, "approve? [y/n/skip]", default="skip")
    decision = "approve" if answer.lower().startswith("y") else None
    if answer.lower().startswith("n"):
        decision = "reject"
    if decision is None:
        return
    try:
        await rc.decide(
            client,
            printer.run_id,
            ev["tool_call_id"],
            decision,
            printer.principal,
            reason="rejected from the CLI" if decision == "reject" else None,
        )
    except WorkflowUpdateFailedError as e:
        printer._plain(f"  not decided: {e.cause or e}")


async def follow_run(
    client: Client,
    run_id: str,
    console: Console,
    *,
    principal: str = "anonymous",
    interactive: bool = False,
    from_offset: int = 0,
    as_json: bool = False,
    settings: Settings | None = None,
) -> RunResult:
    """Print the run's events until it ends; returns its :class:`RunResult`.

    With ``interactive`` (a terminal), an approval request prompts approve/reject/skip. With
    ``as_json`` every event is printed as one JSON line instead. The events are read by
    :func:`workers.live_reader.run_events` with the live channel's secret from ``settings``
    (default :func:`workers.config.load_settings`): the workers' live channels when they are in
    reach, else the run's stream (Update polls).

    Raises:
        temporalio.service.RPCError: no such run, or the server stays unreachable.
    """
    from workers.live_reader import run_events
    from workers.live_server import live_secret

    try:
        secret: bytes | None = live_secret(settings or load_settings())
    except OSError:
        secret = None  # no state folder to keep it in: the stream's polls
    printer = EventPrinter(console, run_id, principal)
    offset, skip, drops = from_offset, 0, 0
    while True:
        try:
            async for ev in run_events(client, run_id, offset, secret=secret, skip_chars=skip):
                offset, skip = ev["offset"] + 1, int(ev.get("chars") or 0)
                if as_json:
                    console.file.write(json.dumps(ev) + "\n")
                    console.file.flush()
                else:
                    printer.show(ev)
                if interactive and ev.get("type") == "approval_requested":
                    await _ask(client, printer, ev)
            break
        except RPCError as e:
            if e.status not in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
                raise
            drops += 1
            if drops > RECONNECTS:
                raise
            await asyncio.sleep(min(5.0, 0.5 * drops))
    return await rc.result(client, run_id)
