"""Audit of the executions themselves: start, continue-as-new, the end, and the run's own records.

Where the history holds the workflow's own state (``RunResult.tool_calls`` of a finished run,
the state carried across continue-as-new), the timeline is made to agree with it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from activities.spec import PinnedSpec
from workers.history._entries import (
    ActivityEntry,
    ContinuedAsNewEntry,
    DecisionEntry,
    ModelStepEntry,
    RunFinishedEntry,
    RunStartedEntry,
    SignalEntry,
    SpecResolvedEntry,
    ToolCallEntry,
)
from workers.history._payloads import as_dict, first_object, first_value
from workers.history._rules import failure_text
from workers.history._walk import At, Walk
from workflows.models import RunResult

_OPEN_TOOL_STATUSES = ("pending", "running", "awaiting_approval", "approved")
_FINISHED_FIELDS = {"status", "stopped_reason", "turns", "output", "error", "duration_ms"}
"""What :class:`RunFinishedEntry` copies from the ``RunResult`` (with ``usage``)."""


def on_run_started(w: Walk, at: At) -> None:
    """``WorkflowExecutionStarted``: the run's request, and the state carried into it, if any."""
    a = at.ev.workflow_execution_started_event_attributes
    req = first_object(w.conv, a.input)
    carry = as_dict(req.get("carry"))
    if not w.req:
        w.req = req
    turn = 0
    if carry:
        try:
            w.pinned = PinnedSpec.model_validate(carry.get("pinned"))
        except ValidationError:
            pass
        turn = int(carry.get("turn") or 0)
        w.paused = bool(carry.get("paused"))
        reconcile_carry(w, carry)
    w.timeline.append(
        RunStartedEntry(
            **at.mark,
            workflow_id=a.workflow_id or at.workflow_id,
            agent=str(req.get("agent", "")),
            input=str(req.get("input", "")),
            tenant_id=str(req.get("tenant_id", "default")),
            principal_id=str(req.get("principal_id", "anonymous")),
            mode=str(req.get("mode", "task")),
            model=req.get("model"),
            task_queue=a.task_queue.name,
            identity=a.identity,
            parent_run_id=req.get("parent_run_id"),
            fork_turn=req.get("fork_turn"),
            seeded_messages=len(req.get("seed_messages") or []),
            continued_from=a.continued_execution_run_id or None,
            turn=turn,
        )
    )


def _close_in_flight(w: Walk) -> None:
    """The execution closed: activities still open were abandoned (cancelled)."""
    for _, entry in w.scheduled.values():
        if isinstance(entry, ModelStepEntry | ActivityEntry | SpecResolvedEntry):
            if entry.status in ("scheduled", "cancel_requested"):
                entry.status = "cancelled"
        elif isinstance(entry, ToolCallEntry) and entry.status == "running":
            entry.status = "cancelled"


def on_continued(w: Walk, at: At) -> None:
    """``WorkflowExecutionContinuedAsNew``: the run goes on in a new execution."""
    _close_in_flight(w)
    a = at.ev.workflow_execution_continued_as_new_event_attributes
    carry = as_dict(first_object(w.conv, a.input).get("carry"))
    reconcile_carry(w, carry)
    w.status = "continued_as_new"
    w.timeline.append(
        ContinuedAsNewEntry(
            **at.mark, new_run_id=a.new_execution_run_id, turn=int(carry.get("turn") or 0)
        )
    )


def on_completed(w: Walk, at: At) -> None:
    """``WorkflowExecutionCompleted``: the ``RunResult``, whose records settle every tool call."""
    _close_in_flight(w)
    raw = first_value(w.conv, at.ev.workflow_execution_completed_event_attributes.result)
    try:
        res = RunResult.model_validate(raw)
    except ValidationError:
        _ended(w, at, "completed", "result not readable as RunResult")
        return
    w.result, w.status = res, res.status
    for rec in res.tool_calls:
        apply_record(w, rec.model_dump(), at.mark)
    if isinstance(raw, dict) and isinstance(raw.get("ignored_signals"), list):
        reconcile_ignored(w, raw["ignored_signals"])  # when the workflow reports them
    outcome = res.model_dump(include=_FINISHED_FIELDS)
    w.timeline.append(RunFinishedEntry(**at.mark, **outcome, usage=res.usage))


def _ended(w: Walk, at: At, status: str, reason: str, who: str = "") -> None:
    _close_in_flight(w)
    w.status = status
    w.timeline.append(
        RunFinishedEntry(
            **at.mark, status=status, stopped_reason=reason, error=(f"by {who}" if who else None)
        )
    )
    for rec in w.tools.values():
        if rec.status in _OPEN_TOOL_STATUSES:
            rec.status = "cancelled"


def on_failed(w: Walk, at: At) -> None:
    """``WorkflowExecutionFailed``: the workflow raised."""
    failure = at.ev.workflow_execution_failed_event_attributes.failure
    _ended(w, at, "workflow_failed", failure_text(failure))


def on_terminated(w: Walk, at: At) -> None:
    """``WorkflowExecutionTerminated``: someone terminated the run."""
    a = at.ev.workflow_execution_terminated_event_attributes
    _ended(w, at, "terminated", a.reason or "terminated", who=a.identity)


def on_cancelled(w: Walk, at: At) -> None:
    """``WorkflowExecutionCanceled``."""
    _ended(w, at, "cancelled", "the workflow was cancelled")


def on_timed_out(w: Walk, at: At) -> None:
    """``WorkflowExecutionTimedOut``."""
    _ended(w, at, "timed_out", "the workflow execution timed out")


def _new_tool_entry(w: Walk, r: dict[str, Any], mark: dict[str, Any]) -> ToolCallEntry:
    call_id = str(r.get("id", ""))
    rec = ToolCallEntry(
        **mark, turn=int(r.get("turn", 0)), tool_call_id=call_id, name=str(r.get("name", ""))
    )
    w.tools[call_id] = rec
    return rec


def apply_record(w: Walk, r: dict[str, Any], mark: dict[str, Any]) -> None:
    """Make a tool call entry agree with the workflow's own ``ToolCallRecord`` ``r``."""
    rec = w.tools.get(str(r.get("id", "")))
    if rec is None:
        rec = _new_tool_entry(w, r, mark)
        w.timeline.append(rec)
    rec.status = str(r.get("status", rec.status))
    rec.policy = str(r.get("policy", rec.policy))
    rec.policy_id = r.get("policy_id") or rec.policy_id
    rec.decided_by = r.get("decided_by") or rec.decided_by
    if r.get("reason") and rec.status in ("error", "timed_out") and not rec.error:
        rec.error = r["reason"]
    ran_with = r.get("run_arguments")  # set where they differ from the model's (#40)
    if ran_with is None:
        ran_with = r.get("arguments")
    if ran_with is not None:
        rec.arguments = ran_with
    if rec.ran:
        rec.result_chars = int(r.get("result_chars") or rec.result_chars or 0)
        rec.duration_ms = r.get("duration_ms", rec.duration_ms)


def reconcile_carry(w: Walk, carry: dict[str, Any]) -> None:
    """Agree with the state the workflow carried across continue-as-new."""
    if not carry:
        return
    mark = {"time": w.timeline[-1].time if w.timeline else "", "run_id": "", "event_id": 0}
    for r in carry.get("tool_calls") or []:
        if not isinstance(r, dict):
            continue
        if r.get("id") in w.tools:
            apply_record(w, r, mark)
        else:  # a call of an execution that was not read: known, for "not waiting" checks
            _new_tool_entry(w, {**r, "id": str(r.get("id"))}, mark)
    reconcile_ignored(w, carry.get("ignored_signals") or [])


def _matching(recorded: list[dict[str, Any]], used: set[int], entry: Any) -> int | None:
    """The first unused ignored-signal record that names ``entry``'s signal, principal, call."""
    name = entry.decision if isinstance(entry, DecisionEntry) else entry.name
    call_id = entry.tool_call_id if isinstance(entry, DecisionEntry) else None
    return next(
        (
            k
            for k, i in enumerate(recorded)
            if k not in used
            and i.get("signal") == name
            and i.get("principal_id") == entry.who
            and (i.get("tool_call_id") or None) == call_id
        ),
        None,
    )


def reconcile_ignored(w: Walk, ignored: list[Any]) -> None:
    """Mark exactly the decisions/signals the workflow recorded as ignored (in order)."""
    recorded = [i for i in ignored if isinstance(i, dict)]
    if not w.chain_complete:  # ignored signals of executions not read would mismatch
        return
    used: set[int] = set()
    for entry in w.timeline:
        if isinstance(entry, DecisionEntry) and entry.via != "signal":
            continue
        if not isinstance(entry, DecisionEntry | SignalEntry):
            continue
        match = _matching(recorded, used, entry)
        if match is not None:
            used.add(match)
            entry.accepted, entry.ignored_reason = False, str(recorded[match].get("reason", ""))
        elif isinstance(entry, DecisionEntry) or entry.name in ("interrupt", "pause", "resume"):
            entry.accepted, entry.ignored_reason = True, None
