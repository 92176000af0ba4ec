"""What a client reads of a run: the ``state`` query's answer, the result, the search attributes.

Defined apart from the request and the carried state (:mod:`workflows.models`, which re-exports
every name here: that is where docs/contract.md names them) so that a client that only reads a
run (``agentctl status``, ``result``, ``list``) imports these small models, not the spec, the
evaluation and the activity contracts the request and the state carry (issue #35).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from temporalio.common import SearchAttributeKey

from activities.guardrail_trip import GuardrailTrip
from activities.usage import Usage
from workflows.client_models import PendingClientTool

__all__ = [
    "SA_AGENT",
    "SA_COST",
    "SA_PARENT",
    "SA_PRINCIPAL",
    "SA_SPEC",
    "SA_STATUS",
    "SA_TENANT",
    "SA_TOKENS",
    "WORKFLOW_NAME",
    "ChildRecord",
    "Decision",
    "IgnoredSignal",
    "LiveStatus",
    "PendingApproval",
    "PlanStepView",
    "PlanView",
    "RunResult",
    "RunState",
    "RunStatus",
    "ToolCallRecord",
    "ToolCallStatus",
]

WORKFLOW_NAME = "AgentRun"
"""The workflow type whose runs these describe (``@workflow.defn`` of workflows/agent_run.py)."""

# The search attributes a run sets and keeps current (workflows/state.py), which listings read
# (``agentctl list``, the console); registered by temporal-dev.yml.
SA_AGENT = SearchAttributeKey.for_keyword("AgentName")
SA_TENANT = SearchAttributeKey.for_keyword("TenantId")
SA_PRINCIPAL = SearchAttributeKey.for_keyword("PrincipalId")
SA_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
SA_TOKENS = SearchAttributeKey.for_int("TotalTokens")
SA_COST = SearchAttributeKey.for_float("CostUsd")
SA_SPEC = SearchAttributeKey.for_keyword("SpecHash")
SA_PARENT = SearchAttributeKey.for_keyword("ForkParentRunId")

RunStatus = Literal[
    "completed",
    "interrupted",
    "max_turns",
    "timeout",
    "loop_detected",
    "budget_exceeded",
    "failed",
    "guardrail",
]
LiveStatus = Literal[
    "starting",
    "running",
    "awaiting_approval",
    "paused",
    "waiting_for_message",
    "budget_paused",
    "guardrail_paused",
]
ToolCallStatus = Literal[
    "ok", "error", "rejected", "denied", "timed_out", "pending", "running", "cancelled"
]


class ToolCallRecord(BaseModel):
    """One tool call of the run, as it appears in ``RunResult.tool_calls`` and ``state``.

    ``duration_ms`` is the tool function's wall time in milliseconds (0 if it never ran).
    """

    id: str
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    """As the model sent them (its raw text if not a JSON object); before patch model-arguments,
    the tool's validated ones once it ran."""
    status: ToolCallStatus
    turn: int
    duration_ms: float = 0.0
    policy: Literal["allow", "deny", "approve"] = "allow"
    reason: str | None = None
    result_chars: int = 0
    decided_by: str | None = None
    run_arguments: dict[str, Any] | None = None
    """What the tool ran with where it differs from ``arguments`` (validated: defaults filled in,
    values coerced; or a person's edit at approval). None: the same, or it never ran."""
    recorded: Literal["answered", "unmatched", "live"] | None = None
    """A replay (``RunRequest.recorded_tools``): ``answered`` from a recorded call; none matched:
    ``unmatched`` (a tool error) or ``live`` (it ran, as the recording allows). None: no replay."""
    policy_id: str | None = None
    """Which policy decided the call: a Cedar policy's id (``cedar:<id>``), a rule
    (``tools.<name>.rules[<i>]``), a tool's entry (``tools.<name>``), ``default`` or ``by_risk``."""


class ChildRecord(BaseModel):
    """A child run started by ``ask_<agent>`` or a plan step (``RunResult.children``).

    ``status`` is ``running`` until the child ends, then its ``RunResult.status``;
    ``tool_call_id`` is the parent's call that started it (or ``plan:<step id>``).
    """

    run_id: str
    agent: str
    status: str = "running"
    usage: Usage = Field(default_factory=Usage)
    tool_call_id: str | None = None
    turn: int = 0


class PlanStepView(BaseModel):
    """One step of the plan as ``state.plan`` shows it (workflows/plan.py)."""

    id: str
    goal: str
    agent: str | None = None
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    status: str = "pending"
    result: str | None = None
    run_id: str | None = None


class PlanView(BaseModel):
    """``state.plan``: the current plan, how many replans it took, and each step's status."""

    steps: list[PlanStepView] = Field(default_factory=list[PlanStepView])
    replans: int = 0
    phase: str = "planning"


class PendingApproval(BaseModel):
    """A tool call waiting for a person. ``requested_at`` is ISO-8601 workflow time."""

    tool_call_id: str
    name: str
    arguments: dict[str, Any] | str
    requested_at: str
    turn: int
    approvers: list[str] = Field(default_factory=list)
    reason: str | None = None
    run_id: str | None = Field(
        default=None, description="set when the call waits in a child run: decide it there or here"
    )
    escalated: str | None = Field(
        default=None, description="the judge's reason for leaving the call to a person"
    )


class Decision(BaseModel):
    """A decision recorded in the run: who, when (ISO-8601 workflow time), what.

    A person's (``via`` signal or update), the approval timer's (``timer``, principal ``system``)
    or the judge's (``judge``, principal ``judge:<model>``, its reason in ``comment``).
    """

    tool_call_id: str
    decision: Literal["approve", "reject", "timeout"]
    principal_id: str
    at: str
    arguments: dict[str, Any] | None = None
    comment: str | None = None
    via: Literal["signal", "update", "timer", "judge"] = "signal"


class IgnoredSignal(BaseModel):
    """A signal that changed nothing, and why."""

    signal: str
    principal_id: str
    at: str
    reason: str
    tool_call_id: str | None = None


class RunResult(BaseModel):
    """Result of ``AgentRun`` (docs/contract.md). ``duration_ms`` is workflow time in milliseconds."""

    model_config = ConfigDict(extra="allow")

    status: RunStatus
    output: str | None = None
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    sandbox_seconds: float = Field(
        default=0.0, description="seconds sandboxed tools ran (their cost is in usage.cost_usd)"
    )
    tool_calls: list[ToolCallRecord] = Field(default_factory=list[ToolCallRecord])
    duration_ms: float = 0.0
    stopped_reason: str = ""
    agent: str = ""
    spec_hash: str = ""
    error: str | None = None
    decisions: list[Decision] = Field(default_factory=list[Decision])
    ignored_signals: list[IgnoredSignal] = Field(default_factory=list[IgnoredSignal])
    parent_run_id: str | None = None
    fork_turn: int | None = None
    children: list[ChildRecord] = Field(default_factory=list[ChildRecord])
    lineage: list[str] = Field(
        default_factory=list, description="agents the run was handed to, in order (handoffs)"
    )
    plan: PlanView | None = None
    guardrails: list[GuardrailTrip] = Field(
        default_factory=list[GuardrailTrip],
        description="every guardrail that tripped, in order (docs/guardrails.md)",
    )
    model_steps: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    """One ``{"turn", "model", "duration_ms", "usage"}`` per model step, naming the model that
    answered (a fallback's name when the primary failed); ``duration_ms`` is the answering call's
    own time, measured in the activity."""


class RunState(BaseModel):
    """Answer of query ``state``."""

    status: LiveStatus | RunStatus
    turn: int
    agent: str = ""
    pending_approvals: list[PendingApproval] = Field(default_factory=list[PendingApproval])
    pending_client_tools: list[PendingClientTool] = Field(
        default_factory=list[PendingClientTool],
        description="calls of tools the client runs, waiting for update tool_result",
    )
    usage: Usage = Field(default_factory=Usage)
    sandbox_seconds: float = 0.0
    tool_calls: list[ToolCallRecord] = Field(default_factory=list[ToolCallRecord])
    ignored_signals: list[IgnoredSignal] = Field(default_factory=list[IgnoredSignal])
    memory: list[str] = Field(
        default_factory=list, description="ids of the memory items given to the current step"
    )
    decisions: list[Decision] = Field(default_factory=list[Decision])
    paused: bool = False
    spec_hash: str = ""
    tenant_id: str = "default"
    principal_id: str = "anonymous"
    compactions: int = 0
    continued_runs: int = 0
    parent_run_id: str | None = None
    fork_turn: int | None = None
    output: str | None = None
    children: list[ChildRecord] = Field(default_factory=list[ChildRecord])
    lineage: list[str] = Field(default_factory=list)
    plan: PlanView | None = None
    guardrails: list[GuardrailTrip] = Field(default_factory=list[GuardrailTrip])
