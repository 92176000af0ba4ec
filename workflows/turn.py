"""The turn as pure data: what comes next after each outcome, and how each tool call settles.

Every function here takes the run state (:class:`workflows.models.RunData`) or plain values and
returns a value; none schedules anything. :class:`workflows.agent_run.AgentRun` carries the values
out (activities, timers, waits) and ``workers/history/`` (audit) calls the same functions to
explain a finished run (:func:`decision_problem`, :func:`is_timeout_failure`).

A turn: :func:`before_model` (``CallModel`` or ``Finish``), the model step, then
:func:`after_reply` (``Finish``, ``WaitForMessage`` or ``RunTools``) or, when the reply could not
be parsed, :func:`after_parse_failure` (``TellModel`` or ``Finish``); tool calls settle through
:func:`settle_by_policy`, :func:`settle_by_verdict` and :func:`settle_failure`; then
:func:`after_tools` (``CallModel``, ``PauseForBudget`` or ``Finish``) and
:func:`should_continue_as_new`.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Mapping
from dataclasses import dataclass
from typing import Any

from temporalio.api.failure.v1 import Failure
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from activities.contracts import ModelReply, ToolCallRequest, ToolInfo
from activities.rules import failure_text, token_upper_bound
from activities.spec import Limits, Policy
from workflows.loop_detection import Signature, detect_loop, turn_signature
from workflows.models import Decision, RunData, RunStatus, ToolCallRecord, ToolCallStatus
from workflows.policy import PolicyDecision, may_decide, parse_arguments

PARSE_FAILURE_NOTE = (
    "Your last reply could not be read as a tool call. To call a tool, reply with exactly one JSON "
    'object {"name": <tool name>, "arguments": {...}} using one of the listed tools; otherwise answer '
    "in plain text."
)
APPROVAL_TIMED_OUT = "No person approved this tool call in time; it was not run."


@dataclass(frozen=True)
class CallModel:
    """Take the next model step."""


@dataclass(frozen=True)
class TellModel:
    """Add ``note`` as a user message and take the next model step (the turn counts)."""

    note: str


@dataclass(frozen=True)
class RunTools:
    """Settle and run the reply's tool calls; ``signature`` is the turn's loop signature."""

    calls: list[ToolCallRequest]
    signature: Signature


@dataclass(frozen=True)
class WaitForMessage:
    """Chat mode: wait for the next ``send_message`` (until the idle timeout)."""


@dataclass(frozen=True)
class PauseForBudget:
    """Hold the run until the budget is raised (``limits.on_budget: pause``)."""

    reason: str


@dataclass(frozen=True)
class Finish:
    """End the run with ``status``."""

    status: RunStatus
    reason: str
    error: str | None = None


@dataclass(frozen=True)
class Settled:
    """How one tool call ended, other than with a tool's outcome: status and the model's text.

    Without running (denied, rejected, an approval that timed out), after failing, or settled by
    its runner (a child run, a handoff, a client tool, a Code Mode script:
    workflows/tool_runners.py). ``reason`` (why it failed), ``duration_ms`` and
    ``result_chars``, when known, go into the call's record (``ToolStep.settle``).
    """

    status: ToolCallStatus
    text: str
    reason: str | None = None
    duration_ms: float | None = None
    result_chars: int | None = None


Next = CallModel | TellModel | RunTools | WaitForMessage | PauseForBudget | Finish


def before_model(data: RunData, limits: Limits) -> CallModel | Finish:
    """A model step, unless the run has taken ``limits.max_turns`` already."""
    if data.turn >= limits.max_turns:
        return Finish("max_turns", f"reached max_turns={limits.max_turns}")
    return CallModel()


def after_reply(data: RunData, reply: ModelReply, limits: Limits) -> Next:
    """What a model reply leads to: the answer (task mode), the next message (chat), tool calls.

    ``data.signatures`` are the earlier turns' signatures; a reply whose calls close a loop
    (:func:`workflows.loop_detection.detect_loop`) finishes the run ``loop_detected``.
    """
    if not reply.tool_calls:
        if data.req is not None and data.req.mode == "chat":
            return WaitForMessage()
        return Finish("completed", "the model answered")
    sig = turn_signature([(c.name, c.arguments) for c in reply.tool_calls])
    loop = detect_loop([*data.signatures, sig], limits.loop_window, limits.loop_repeats)
    if loop:
        return Finish("loop_detected", loop)
    return RunTools(list(reply.tool_calls), sig)


def after_parse_failure(failures: int, allowed: int, error: str) -> TellModel | Finish:
    """The model's ``failures``-th unparsable output: tell it (up to ``allowed`` times) or fail."""
    if failures <= allowed:
        return TellModel(PARSE_FAILURE_NOTE)
    return Finish("failed", "the model's output could not be parsed", error)


def budget_exceeded(data: RunData) -> str | None:
    """Why the run is over its token, cost or sandbox-time budget, or None."""
    used, cap = data.budget.usage.total_tokens, data.budget.max_total_tokens
    if cap is not None and used >= cap:
        return f"used {used} tokens of a budget of {cap}"
    cost, cap_usd = data.budget.usage.cost_usd, data.budget.max_cost_usd
    if cap_usd is not None and cost >= cap_usd:
        return f"cost {cost:.6f} USD of a budget of {cap_usd} USD"
    secs, cap_s = data.budget.sandbox_seconds, data.budget.max_sandbox_seconds
    if cap_s is not None and secs >= cap_s:
        return f"sandbox time {secs:.1f} s of a budget of {cap_s} s"
    return None


def after_tools(data: RunData, limits: Limits) -> CallModel | PauseForBudget | Finish:
    """After a turn's tool calls: go on, pause on the budget, or stop ``budget_exceeded``."""
    over = budget_exceeded(data)
    if over is None:
        return CallModel()
    if limits.on_budget == "pause":
        return PauseForBudget(over)
    return Finish("budget_exceeded", over)


def should_continue_as_new(
    turn: int, limits: Limits, suggested: bool, history_bytes: int, history_events: int
) -> bool:
    """At a turn boundary: every N turns, when Temporal suggests it, or at the spec's thresholds.

    The thresholds (``continue_as_new_at_bytes`` / ``_at_events``) come before Temporal's 4 MiB
    suggestion: a turn may add hundreds of KB, and a smaller history replays faster.
    """
    every = limits.continue_as_new_every_turns
    if every and turn > 0 and turn % every == 0:
        return True
    return (
        suggested
        or history_bytes >= limits.continue_as_new_at_bytes
        or history_events >= limits.continue_as_new_at_events
    )


def needs_token_count(data: RunData, tools: list[ToolInfo], budget: float) -> bool:
    """Whether the transcript may be over ``budget`` tokens, so ``tokens.count`` must count it.

    Exact counts of the first ``len(data.token_counts)`` messages are known; the others (and the
    tool schemas, until counted) are bounded with :func:`token_upper_bound`.
    """
    new = data.transcript.messages[len(data.transcript.token_counts) :]
    known = sum(data.transcript.token_counts) + tools_tokens_bound(data, tools)
    return known + sum(token_upper_bound(m) for m in new) > budget


def tools_tokens_bound(data: RunData, tools: list[ToolInfo]) -> int:
    """Tokens of the tool schemas: counted (``data.tools_tokens``), else their upper bound."""
    if data.transcript.tools_tokens is not None:
        return data.transcript.tools_tokens
    return sum(token_upper_bound(t.openai_schema()) for t in tools)


# ------------------------------------------------------------------ tool calls


def settle_by_policy(
    call: ToolCallRequest, decision: PolicyDecision, turn: int
) -> tuple[ToolCallRecord, Settled | None]:
    """The call's record as the policy leaves it, and its settlement when the policy denied it."""
    args = parse_arguments(call.arguments)
    rec = ToolCallRecord(
        id=call.id,
        name=call.name,
        arguments=args if args is not None else call.arguments,
        status="pending",
        turn=turn,
        policy=decision.action,
        reason=decision.reason,
    )
    if decision.action == "deny":
        text = f"Tool call denied by policy: {decision.reason}. Do not retry it."
        return rec, Settled("denied", text)
    return rec, None


def ran_with(rec: ToolCallRecord) -> dict[str, Any] | str:
    """The arguments the call runs with: ``run_arguments`` when set, else ``arguments``."""
    return rec.run_arguments if rec.run_arguments is not None else rec.arguments


def settle_by_verdict(verdict: Decision | None) -> Settled | None:
    """How a call that waited for a person settles: None when approved (it runs)."""
    if verdict is not None and verdict.decision == "approve":
        return None
    if verdict is not None and verdict.decision == "timeout":
        return Settled("timed_out", APPROVAL_TIMED_OUT)
    why = verdict.comment if verdict is not None and verdict.comment else "no reason given"
    if verdict is not None and verdict.via == "judge":
        who = f"The policy's judge ({verdict.principal_id})"
        return Settled("rejected", f"{who} rejected this tool call; it was not run. Reason: {why}")
    return Settled("rejected", f"A person rejected this tool call; it was not run. Reason: {why}")


def settle_failure(
    timed_out: bool,
    cancelled: bool,
    message: str,
    attempts: int,
    limit_seconds: float | None = None,
) -> Settled:
    """A tool activity that failed for good (:func:`activities.rules.failure_text`)."""
    return Settled(*failure_text(timed_out, cancelled, message, attempts, limit_seconds))


def is_timeout_error(error: BaseException | None) -> bool:
    """True when an activity error's cause chain holds a Temporal timeout (in the workflow).

    Start-to-close, schedule-to-close and heartbeat timeouts all count.
    """
    while error is not None:
        if isinstance(error, ActivityTimeoutError):
            return True
        error = getattr(error, "cause", None)
    return False


def is_timeout_failure(failure: Failure | None) -> bool:
    """The same as :func:`is_timeout_error` for a failure read from a history event."""
    while failure is not None and failure.ByteSize():
        if failure.HasField("timeout_failure_info"):
            return True
        failure = failure.cause if failure.HasField("cause") else None
    return False


def decision_problem(
    call_id: str,
    principal_id: str,
    *,
    decided: Mapping[str, str],
    waiting: Mapping[str, list[str]],
    known: Container[str],
    policy: Policy | None,
    roles: Collection[str] = (),
) -> str | None:
    """Why a person's decision on ``call_id`` cannot be taken now, or None when it can.

    Args:
        call_id: the tool call the decision names.
        principal_id: who decides.
        decided: call id -> the decision already taken (``approve``, ``reject``, ``timeout``).
        waiting: call id -> its approvers, for the calls waiting for a person now.
        known: every tool call id of the run.
        policy: the pinned policy (who may decide); None before the spec is pinned.
        roles: the decider's roles as the decision states them (:func:`policy.may_decide`).
    """
    if call_id in decided:
        return f"tool call {call_id} was already decided ({decided[call_id]})"
    approvers = waiting.get(call_id)
    if approvers is None or policy is None:
        return f"tool call {call_id} is {'not waiting for approval' if call_id in known else 'unknown'}"
    allowed, why = may_decide(policy, approvers, principal_id, roles)
    return None if allowed else why


def unique_call_ids(calls: list[ToolCallRequest], taken: Collection[str]) -> list[ToolCallRequest]:
    """``calls`` with every id unique in the run; the others are kept as they are.

    An id already ``taken`` (or seen earlier in ``calls``) becomes ``<id>-2``, ``<id>-3``, ...
    (the first free one). A model may repeat a call id within a reply or reuse one of an earlier turn (small local
    models answer ``call_0`` every turn). Verdicts are kept by call id, so without this a call
    could run on the approval of another.
    """
    seen: set[str] = set(taken)
    out: list[ToolCallRequest] = []
    for call in calls:
        new_id, n = call.id, 2
        while new_id in seen:
            new_id, n = f"{call.id}-{n}", n + 1
        seen.add(new_id)
        out.append(call if new_id == call.id else call.model_copy(update={"id": new_id}))
    return out
