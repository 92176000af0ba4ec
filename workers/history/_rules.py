"""The workflow's own rules, as the audit applies them to a recorded history.

``AgentRun`` decides these while it runs; the audit derives the same answers from the events by
calling the workflow's pure functions (:mod:`workflows.turn`) where they exist. What the audit
still re-derives itself is marked ``# shared-with-workflow:`` with the workflow code it mirrors.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import Any, Literal

from activities.contracts import ToolCallRequest
from workers.history._entries import AskedToolCall
from workflows import turn
from workflows.models import Decision
from workflows.policy import PolicyDecision
from workflows.turn import decision_problem

__all__ = [
    "AGENT_RUN_SIGNALS",
    "decision_problem",
    "failure_text",
    "signal_verdict",
    "status_after_decision",
    "status_after_policy",
    "tool_failure_status",
]

SignalVerdict = tuple[bool | None, str | None]
"""``(accepted, why ignored)``; ``accepted`` is None when the history alone cannot tell."""

AGENT_RUN_SIGNALS = ("interrupt", "pause", "resume", "send_message", "raise_budget")
"""Signals other than approve/reject that ``AgentRun`` has handlers for."""


def status_after_policy(
    call: AskedToolCall, decision: PolicyDecision, turn_no: int
) -> tuple[str, dict[str, Any] | str]:
    """Status and arguments of a call the model asked for, once the policy has spoken.

    The record is the workflow's own (:func:`workflows.turn.settle_by_policy`): ``denied`` or
    ``pending`` (allowed: it runs); a call waiting for a person is ``awaiting_approval`` here.
    """
    request = ToolCallRequest(id=call.id, name=call.name, arguments=call.arguments)
    rec, settled = turn.settle_by_policy(request, decision, turn_no)
    if settled is not None:
        return settled.status, rec.arguments
    return ("awaiting_approval" if decision.action == "approve" else rec.status), rec.arguments


def status_after_decision(decision: str, principal_id: str, at: str) -> str:
    """Status of a waiting call after ``approve`` (``approved``: it runs), ``reject`` or ``timeout``.

    As :func:`workflows.turn.settle_by_verdict` settles it.
    """
    verdict = Decision(
        tool_call_id="",
        decision=decision,  # pyright: ignore[reportArgumentType] - a str from the history; pydantic validates the Literal
        principal_id=principal_id,
        at=at,
    )
    settled = turn.settle_by_verdict(verdict)
    return "approved" if settled is None else settled.status


def _failure_chain(failure: Any) -> Iterator[Any]:
    f = failure
    while f is not None:
        yield f
        f = f.cause if f.HasField("cause") else None


def tool_failure_status(timed_out: bool, failure: Any) -> Literal["timed_out", "error"]:
    """``timed_out`` or ``error`` for a tool activity that closed without a result.

    Classified from the history's structure as the workflow classifies the error it gets
    (:func:`workflows.turn.is_timeout_failure`, the history's side of ``is_timeout_error``): the
    activity closed as ``ActivityTaskTimedOut``, or a failure of its cause chain carries
    ``timeout_failure_info`` (a start-to-close, schedule-to-close or heartbeat timeout). A tool
    that raised an error of its own (even Python's ``TimeoutError``) is an ``error``.
    """
    return "timed_out" if timed_out or turn.is_timeout_failure(failure) else "error"


def failure_text(failure: Any) -> str:
    """The messages of a failure and its causes (at most 5), joined by ``": "``."""
    return ": ".join(islice((f.message for f in _failure_chain(failure) if f.message), 5)) or (
        "failed"
    )


# shared-with-workflow: RunHandlers.interrupt / pause / resume (workflows/handlers.py)
def signal_verdict(
    name: str, *, interrupted: bool, paused: bool, budget_may_pause: bool
) -> SignalVerdict:
    """Whether ``AgentRun`` takes signal ``name`` (not approve/reject) given the run's state.

    ``interrupt`` is ignored when already interrupted; ``pause`` when paused; ``resume`` when
    not paused. With ``limits.on_budget == "pause"`` a budget pause is not visible in the
    history, so ``pause``/``resume`` are unknown (None). A signal ``AgentRun`` has no handler
    for is unknown too.
    """
    if name not in AGENT_RUN_SIGNALS:
        return None, None
    if name == "interrupt":
        return (False, "already interrupted") if interrupted else (True, None)
    if name in ("pause", "resume"):
        if budget_may_pause:
            return None, None
        if name == "pause" and paused:
            return False, "already paused"
        if name == "resume" and not paused:
            return False, "not paused"
    return True, None
