"""``agentctl`` commands on runs: run, follow, status, result, decisions, signals, list, chat."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import typer
from temporalio.client import Client, WorkflowFailureError

from workers import client as rc
from workers.cli.base import (
    EXIT_OK,
    EXIT_RUN_NOT_COMPLETED,
    EXIT_USAGE,
    CommandFailed,
    PrincipalOpt,
    _exit_for,
    _follow,
    _print_result,
    _with_client,
    app,
    err,
    out,
    valid_input,
    web_ui_url,
)
from workflows.client_models import ToolResultUpdate
from workflows.view_models import SA_AGENT, SA_STATUS, SA_TOKENS, RunState


@app.command()
def run(
    request: str = typer.Argument(..., help="what the agent should do"),
    agent: str = typer.Option("default", "--agent", "-a", help="agent of agents/agents.yml"),
    detach: bool = typer.Option(False, "--detach", help="print the run id and return"),
    follow: bool = typer.Option(False, "--follow", "-f", help="show progress live"),
    as_json: bool = typer.Option(False, "--json", help="print only the RunResult JSON"),
    tenant: str = typer.Option(
        "default", "--tenant", envvar="AGENT_TENANT", help="tenant the run belongs to"
    ),
    principal: str = PrincipalOpt,
    mode: str = typer.Option("task", "--mode", help="task or chat"),
    max_turns: int | None = typer.Option(
        None, "--max-turns", help="override the spec's limits.max_turns"
    ),
    max_seconds: float | None = typer.Option(
        None, "--max-seconds", help="override the spec's limits.max_seconds"
    ),
    model: str | None = typer.Option(None, "--model", help="override the spec's model"),
    run_id: str | None = typer.Option(None, "--id", help="workflow id (default run-<uuid4>)"),
) -> None:
    """Start a run; wait for and print its result (exit 0 only when it completed)."""
    if mode not in ("task", "chat"):
        err.print("error: --mode must be task or chat")
        raise typer.Exit(EXIT_USAGE)
    from workflows.models import RunRequest  # the spec's models: only to start a run

    with valid_input():
        req = RunRequest(
            agent=agent,
            input=request,
            tenant_id=tenant,
            principal_id=principal,
            mode=mode,
            limits={"max_turns": max_turns, "max_seconds": max_seconds},  # pyright: ignore[reportArgumentType] - pydantic validates the dict into LimitsOverride
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
        from workers.cli.follow import follow_run

        res = await follow_run(
            client, run_id, out, principal=principal, from_offset=from_offset, as_json=as_json
        )
        if not as_json:
            _print_result(res, False, run_id)
        return _exit_for(res)

    raise typer.Exit(_with_client(go))


@app.command()
def status(
    run_id: str, as_json: bool = typer.Option(False, "--json", help="print the state as JSON")
) -> None:
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
                + (f" in child run {p.run_id}" if p.run_id else "")
                + (f"; the judge escalated it: {p.escalated}" if p.escalated else ""),
                highlight=False,
                markup=False,
            )
        for w in st.pending_client_tools:
            out.print(
                f"  client tool: {w.tool_call_id} {w.name} {json.dumps(w.arguments)} "
                f"(until {w.deadline}; agentctl tool-result {run_id} {w.tool_call_id} --content ...)",
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
def result(
    run_id: str, as_json: bool = typer.Option(False, "--json", help="print the RunResult as JSON")
) -> None:
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
    comment: str | None = typer.Option(None, "--comment", help="recorded with the decision"),
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


@app.command("tool-result")
def tool_result(
    run_id: str,
    call_id: str = typer.Argument(
        ..., help="the client tool's call id (state: pending_client_tools)"
    ),
    content: str | None = typer.Option(None, "--content", help="the result the model reads"),
    error: str | None = typer.Option(
        None, "--error", help="the tool failed: what to tell the model"
    ),
    principal: str = PrincipalOpt,
) -> None:
    """Give the result of a client tool's call (update ``tool_result``: refusals are errors)."""
    if (content is None) == (error is None):
        err.print("error: give exactly one of --content and --error")
        raise typer.Exit(EXIT_USAGE)
    upd = ToolResultUpdate(
        tool_call_id=call_id,
        content=content if content is not None else error or "",
        is_error=error is not None,
        principal_id=principal,
    )

    async def go(client: Client) -> None:
        res = await rc.tool_result(client, run_id, upd)
        out.print(f"result of {res.tool_call_id} given ({res.status})", highlight=False)

    _with_client(go)


@app.command()
def interrupt(
    run_id: str,
    reason: str = typer.Option(
        "interrupted from the CLI", "--reason", help="recorded as why the run stopped"
    ),
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
    agent: str | None = typer.Option(None, "--agent", help="only runs of this agent"),
    status_: str | None = typer.Option(
        None, "--status", help="AgentStatus, e.g. awaiting_approval"
    ),
    tenant: str | None = typer.Option(None, "--tenant", help="only runs of this tenant"),
    limit: int = typer.Option(20, "--limit", help="at most this many runs"),
) -> None:
    """List runs, filtered by the run's search attributes."""
    query = rc.list_query(agent, status_, tenant)

    async def go(client: Client) -> None:
        runs = await rc.list_runs(client, query, limit)
        for wf in runs:
            sa = wf.typed_search_attributes
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
    agent: str = typer.Option("default", "--agent", "-a", help="agent of agents/agents.yml"),
    principal: str = PrincipalOpt,
) -> None:
    """A conversation: one durable run in chat mode; type messages, empty line or Ctrl-D ends."""
    from workflows.models import RunRequest

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
                    "guardrail",
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
