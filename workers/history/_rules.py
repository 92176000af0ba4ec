"""The workflow's own rules, as the audit applies them to a recorded history.

``AgentRun`` decides these while it runs (``workflows/agent_run.py``); the audit derives the same
answers from the events. Each rule is one function marked ``# shared-with-workflow:`` with the
workflow code it mirrors, so that both can call one function once the workflow's decisions are
pure functions of their own.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Mapping
from itertools import islice
from typing import Any, Literal

from activities.spec import Policy
from workflows.policy import may_decide

SignalVerdict = tuple[bool | None, str | None]
"""``(accepted, why ignored)``; ``accepted`` is None when the history alone cannot tell."""

AGENT_RUN_SIGNALS = ("interrupt", "pause", "resume", "send_message", "raise_budget")
"""Signals other than approve/reject that ``AgentRun`` has handlers for."""


# shared-with-workflow: AgentRun._decision_problem (workflows/agent_run.py)
def decision_problem(
    call_id: str,
    principal_id: str,
    *,
    decided: Mapping[str, str],
    waiting: Mapping[str, list[str]],
    known: Container[str],
    policy: Policy | None,
) -> str | None:
    """Why a person's decision on ``call_id`` is ignored, or None when it is taken.

    Args:
        call_id: the tool call the decision names.
        principal_id: who decides.
        decided: call id -> the decision already taken in this execution (``approve``,
            ``reject``, ``timeout``).
        waiting: call id -> its approvers, for the calls waiting for a person now.
        known: every tool call id of the run.
        policy: the pinned policy (who may decide); None before the spec is pinned.
    """
    if call_id in decided:
        return f"tool call {call_id} was already decided ({decided[call_id]})"
    approvers = waiting.get(call_id)
    if approvers is None or policy is None:
        return f"tool call {call_id} is {'not waiting for approval' if call_id in known else 'unknown'}"
    allowed, why = may_decide(policy, approvers, principal_id)
    return None if allowed else why


# shared-with-workflow: AgentRun._run_tool_calls (a call's status once the policy has spoken)
def status_after_policy(action: str) -> str:
    """``ToolCallRecord.status`` of a call the model asked for, by policy action.

    ``allow`` -> ``pending`` (it runs), ``deny`` -> ``denied``, ``approve`` ->
    ``awaiting_approval``.
    """
    return {"allow": "pending", "deny": "denied", "approve": "awaiting_approval"}[action]


# shared-with-workflow: AgentRun._run_tool_calls (a waiting call once it is decided)
def status_after_decision(decision: str) -> str:
    """Status of a waiting call after ``approve`` (``approved``), ``reject`` or ``timeout``."""
    return {"approve": "approved", "reject": "rejected"}.get(decision, "timed_out")


def _failure_chain(failure: Any) -> Iterator[Any]:
    f = failure
    while f is not None:
        yield f
        f = f.cause if f.HasField("cause") else None


# shared-with-workflow: AgentRun._invoke (status of a tool activity that failed for good)
def tool_failure_status(timed_out: bool, failure: Any) -> Literal["timed_out", "error"]:
    """``timed_out`` or ``error`` for a tool activity that closed without a result.

    Classified from the history's structure, not from message text: the activity closed as
    ``ActivityTaskTimedOut``, or a failure of its cause chain carries ``timeout_failure_info``
    (a start-to-close, schedule-to-close or heartbeat timeout of Temporal's). A tool that
    raised an error of its own (even Python's ``TimeoutError``) is an ``error``.
    """
    if timed_out:
        return "timed_out"
    return (
        "timed_out"
        if any(f.HasField("timeout_failure_info") for f in _failure_chain(failure))
        else "error"
    )


def failure_text(failure: Any) -> str:
    """The messages of a failure and its causes (at most 5), joined by ``": "``."""
    return ": ".join(islice((f.message for f in _failure_chain(failure) if f.message), 5)) or (
        "failed"
    )


# shared-with-workflow: AgentRun.interrupt / pause / resume signal handlers
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
