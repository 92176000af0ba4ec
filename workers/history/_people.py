"""Audit of what people (and the approval timer) sent: decisions and other signals."""

from __future__ import annotations

from typing import Any

from workers.history._entries import DecisionEntry, SignalEntry
from workers.history._payloads import as_dict, first_object, first_value
from workers.history._rules import (
    decision_problem,
    failure_text,
    signal_verdict,
    status_after_decision,
)
from workers.history._walk import At, Walk, iso

SDK_SIGNAL_PREFIX = "__temporal_"
"""Signals named so are the Temporal SDK's own, e.g. ``__temporal_workflow_stream_publish`` (the
model activity's text deltas, ``activities/streaming.py``); the audit leaves them out, as it does
the stream's poll updates."""


def settle(
    w: Walk, call_id: str, decision: str, who: str, arguments: dict[str, Any] | None, at: At
) -> None:
    """Record a decision that the workflow took (approve, reject or the approval timeout)."""
    w.verdicts[call_id] = decision
    rec = w.tools.get(call_id)
    if rec is None:
        return
    if decision != "timeout":
        rec.decided_by = who
    rec.status = status_after_decision(decision, who, iso(at.ev))
    if decision == "approve":
        if arguments is not None:
            rec.arguments = arguments
    else:  # the call never runs: it is settled here
        rec.time, rec.event_id, rec.run_id = iso(at.ev), at.ev.event_id, at.run_id
    if all(cid in w.verdicts for cid in w.waiting):
        w.waiting.clear()


def _approved_arguments(decision: str, p: dict[str, Any]) -> dict[str, Any] | None:
    """The edited arguments of an approval (none for a rejection)."""
    args = p.get("arguments")
    return args if decision == "approve" and isinstance(args, dict) else None


def _decision_entry(
    at: At, via: str, decision: str, p: dict[str, Any], identity: str, **fields: Any
) -> DecisionEntry:
    """A decision entry for payload ``p`` (its ``tool_call_id`` and ``principal_id``)."""
    return DecisionEntry(
        **at.mark,
        via=via,  # pyright: ignore[reportArgumentType] - a str from the history; pydantic validates the Literal
        decision=decision,  # pyright: ignore[reportArgumentType] - a str from the history; pydantic validates the Literal
        tool_call_id=str(p.get("tool_call_id", "")),
        who=str(p.get("principal_id", "anonymous")),
        identity=identity,
        **fields,
    )


def _decision_signal(w: Walk, at: At, name: str, p: dict[str, Any], identity: str) -> None:
    who = str(p.get("principal_id", "anonymous"))
    call_id = str(p.get("tool_call_id", ""))
    problem = decision_problem(
        call_id,
        who,
        decided=w.verdicts,
        waiting=w.waiting,
        known=w.tools,
        policy=w.policy(),
    )
    args = _approved_arguments(name, p)
    w.timeline.append(
        _decision_entry(
            at,
            "signal",
            name,
            p,
            identity,
            arguments=args,
            comment=p.get("comment") if name == "approve" else p.get("reason", "rejected"),
            accepted=problem is None,
            ignored_reason=problem,
        )
    )
    if problem is None:
        settle(w, call_id, name, who, args, at)


def on_signal(w: Walk, at: At) -> None:
    """``WorkflowExecutionSignaled``: a decision, or another signal judged by the run's rules.

    The SDK's own signals (:data:`SDK_SIGNAL_PREFIX`) are left out.
    """
    a = at.ev.workflow_execution_signaled_event_attributes
    if a.signal_name.startswith(SDK_SIGNAL_PREFIX):
        return  # the SDK's own (e.g. the event stream's publish): no person sent it
    payload = first_value(w.conv, a.input)
    p = as_dict(payload)
    name = a.signal_name
    if name in ("approve", "reject"):
        _decision_signal(w, at, name, p, a.identity)
        return
    accepted, why = signal_verdict(
        name,
        interrupted=w.interrupted,
        paused=w.paused,
        budget_may_pause=w.budget_may_pause(),
    )
    if name == "interrupt":
        w.interrupted = True
    elif name in ("pause", "resume"):
        w.paused = name == "pause"
    w.timeline.append(
        SignalEntry(
            **at.mark,
            name=name,
            who=str(p.get("principal_id", "anonymous")),
            identity=a.identity,
            payload=payload,
            accepted=accepted,
            ignored_reason=why,
        )
    )


def on_update_accepted(w: Walk, at: At) -> None:
    """``WorkflowExecutionUpdateAccepted`` of update ``decide``: the decision is taken."""
    req = at.ev.workflow_execution_update_accepted_event_attributes.accepted_request
    if req.input.name != "decide":
        return
    p = first_object(w.conv, req.input.args)
    who = str(p.get("principal_id", "anonymous"))
    decision = str(p.get("decision", "approve"))
    call_id = str(p.get("tool_call_id", ""))
    args = _approved_arguments(decision, p)
    comment = p.get("comment") if decision == "approve" else (p.get("reason") or p.get("comment"))
    w.timeline.append(
        _decision_entry(
            at,
            "update",
            decision,
            p,
            req.meta.identity,
            arguments=args,
            comment=comment,
            accepted=True,
            update_id=req.meta.update_id or None,
        )
    )
    settle(w, call_id, decision, who, args, at)


def on_update_rejected(w: Walk, at: At) -> None:
    """``WorkflowExecutionUpdateRejected`` of update ``decide``: an ignored decision."""
    a = at.ev.workflow_execution_update_rejected_event_attributes
    req = a.rejected_request
    if req.input.name != "decide":
        return
    p = first_object(w.conv, req.input.args)
    w.timeline.append(
        _decision_entry(
            at,
            "update",
            "reject" if p.get("decision") == "reject" else "approve",
            p,
            req.meta.identity,
            accepted=False,
            ignored_reason=failure_text(a.failure),
            update_id=req.meta.update_id or None,
        )
    )


# shared-with-workflow: ToolStep._await_approvals (workflows/tool_calls.py): a timer firing while
# calls wait is the approval timeout (the deadline timer is not told apart)
def on_timer_fired(w: Walk, at: At) -> None:
    """``TimerFired`` while calls wait for approval: each waiting call timed out."""
    for cid in [cid for cid in w.waiting if cid not in w.verdicts]:
        w.timeline.append(
            DecisionEntry(
                **at.mark,
                via="timer",
                decision="timeout",
                tool_call_id=cid,
                who="system",
                accepted=True,
            )
        )
        settle(w, cid, "timeout", "system", None, at)
