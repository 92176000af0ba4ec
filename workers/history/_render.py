"""An :class:`Audit` as readable text: a header, one line per timeline entry, a summary."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from workers.history import _entries as en
from workers.history._payloads import as_dict


def _args_text(args: Any, limit: int = 160) -> str:
    text = (
        json.dumps(args, ensure_ascii=False, sort_keys=True)
        if isinstance(args, dict)
        else str(args)
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip(text: str | None, limit: int = 120) -> str:
    t = (text or "").replace("\n", " ")
    return t if len(t) <= limit else t[: limit - 1] + "…"


def _verdict(accepted: bool | None, ignored_reason: str | None) -> str:
    if accepted is None:
        return "effect unknown"
    return "accepted" if accepted else f"IGNORED: {ignored_reason}"


def _run_started(e: en.RunStartedEntry) -> str:
    if e.continued_from:
        return f"continued    execution {e.run_id} (from {e.continued_from}) at turn {e.turn}"
    lineage = (
        f"; forked from {e.parent_run_id} at turn {e.fork_turn} ({e.seeded_messages} seed messages)"
        if e.parent_run_id
        else ""
    )
    model = f" model={e.model}" if e.model else ""
    return (
        f"run started  agent={e.agent}{model} tenant={e.tenant_id} principal={e.principal_id}"
        f" mode={e.mode} queue={e.task_queue}{lineage}: {_clip(e.input)!r}"
    )


def _spec_resolved(e: en.SpecResolvedEntry) -> str:
    if e.status != "completed":
        return f"spec         {e.agent}: {e.status}{': ' + e.error if e.error else ''}"
    return (
        f"spec         {e.agent} pinned: model={e.model} hash={e.spec_hash[:12]}"
        f" tools={','.join(e.tools)}"
    )


def _model_step(e: en.ModelStepEntry) -> str:
    asks = ", ".join(f"{c.name}({c.id})" for c in e.tool_calls)
    what = (
        f"-> asks {asks}"
        if asks
        else (f"-> answers {_clip(e.content, 80)!r}" if e.content is not None else "")
    )
    if e.latency_ms is not None:
        timing = f"{e.latency_ms:.0f} ms"
    else:
        timing = "in flight" if e.status in ("scheduled", "cancel_requested") else "no result"
    err = f" error: {e.error}" if e.error else ""
    return (
        f"model step   turn {e.turn} {e.model} [{e.status}, {e.attempts} attempt(s), {timing}] "
        f"tokens {e.prompt_tokens}+{e.completion_tokens}, {e.messages} messages {what}{err}"
    ).rstrip()


def _approval_requested(e: en.ApprovalRequestedEntry) -> str:
    who = ", ".join(e.approvers) or "anyone"
    return (
        f"approval     {e.tool_call_id} {e.name}({_args_text(e.arguments)}) waits for a person"
        f" (approvers: {who}; {e.reason})"
    )


def _tool_call(e: en.ToolCallEntry) -> str:
    parts = [f"tool call    {e.tool_call_id} {e.name}({_args_text(e.arguments)}) -> {e.status}"]
    if e.requested_arguments is not None and e.ran and e.requested_arguments != e.arguments:
        parts.append(f"(model asked {_args_text(e.requested_arguments)})")
    if e.policy != "allow":
        parts.append(
            f"policy={e.policy}"
            + (f" ({e.policy_reason})" if e.policy_reason and e.status == "denied" else "")
        )
    if e.decided_by:
        parts.append(f"decided by {e.decided_by}")
    if e.ran:
        parts.append(
            f"{e.result_chars or 0} chars, {e.duration_ms or 0:.1f} ms in the tool,"
            f" {e.latency_ms or 0:.0f} ms scheduled->closed, {e.attempts} attempt(s)"
        )
    if e.error:
        parts.append(f"error: {_clip(e.error)}")
    return " ".join(parts)


def _decision(e: en.DecisionEntry) -> str:
    args = f" args={_args_text(e.arguments)}" if e.arguments is not None else ""
    note = f" ({_clip(e.comment, 80)})" if e.comment else ""
    what = f"{e.decision} {e.tool_call_id} by {e.who} via {e.via}"
    return f"decision     {what}{args}{note} -> {_verdict(e.accepted, e.ignored_reason)}"


def _signal(e: en.SignalEntry) -> str:
    detail = {k: v for k, v in as_dict(e.payload).items() if k != "principal_id"}
    verdict = _verdict(e.accepted, e.ignored_reason)
    return f"signal       {e.name} by {e.who} {_args_text(detail)} -> {verdict}"


def _activity(e: en.ActivityEntry) -> str:
    return f"activity     {e.activity_type} [{e.status}, {e.attempts} attempt(s)]" + (
        f" error: {e.error}" if e.error else ""
    )


def _continued(e: en.ContinuedAsNewEntry) -> str:
    return f"continue-as-new after turn {e.turn} -> execution {e.new_run_id}"


def _run_finished(e: en.RunFinishedEntry) -> str:
    u = e.usage
    err = f" error: {e.error}" if e.error else ""
    return (
        f"run finished {e.status}: {e.stopped_reason}; {e.turns} turn(s),"
        f" tokens {u.prompt_tokens}+{u.completion_tokens}={u.total_tokens},"
        f" cost ${u.cost_usd:.6f}{err}"
    )


def _guardrail(e: en.GuardrailEntry) -> str:
    call = f" (call {e.tool_call_id})" if e.tool_call_id else ""
    return (
        f"turn {e.turn}: guardrail {e.guardrail} tripped on {e.stage}{call}: {e.action}; {e.detail}"
    )


_LINES: dict[type, Callable[[Any], str]] = {
    en.RunStartedEntry: _run_started,
    en.SpecResolvedEntry: _spec_resolved,
    en.ModelStepEntry: _model_step,
    en.ApprovalRequestedEntry: _approval_requested,
    en.ToolCallEntry: _tool_call,
    en.DecisionEntry: _decision,
    en.SignalEntry: _signal,
    en.ActivityEntry: _activity,
    en.ContinuedAsNewEntry: _continued,
    en.GuardrailEntry: _guardrail,
    en.RunFinishedEntry: _run_finished,
}


def entry_line(e: Any) -> str:
    """One timeline entry as a line of text (without its time)."""
    line = _LINES.get(type(e))
    return line(e) if line is not None else f"{getattr(e, 'kind', '?')}"


def render_audit_text(a: en.Audit) -> str:
    """A readable timeline: a header, one line per entry (time, what, details), a summary."""
    lines = [
        f"run {a.workflow_id}: {a.status}; agent {a.agent}; tenant {a.tenant_id};"
        f" started by {a.principal_id}"
    ]
    if a.parent_run_id:
        lines.append(f"forked from {a.parent_run_id} at turn {a.fork_turn}")
    runs = f"{len(a.run_ids)} execution(s)" + (
        "" if a.chain_complete else " (older executions not read)"
    )
    lines += [f"{runs}, {a.events} events", ""]
    lines += [f"{e.time}  {entry_line(e)}" for e in a.timeline]
    lines.append("")
    by_status: dict[str, int] = {}
    for c in a.tool_calls:
        by_status[c.status] = by_status.get(c.status, 0) + 1
    lines.append(
        f"{len(a.model_steps)} model step(s), {len(a.tool_calls)} tool call(s) ("
        + ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
        + f"), {len(a.decisions)} decision(s), {len(a.ignored)} ignored"
    )
    if a.actions:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(a.actions.items()) if k != "total")
        lines.append(f"Temporal Cloud actions: {a.actions.get('total', 0)} ({kinds})")
    return "\n".join(lines) + "\n"
