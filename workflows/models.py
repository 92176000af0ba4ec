"""The public data of workflow ``AgentRun``: request, result, signals, update, queries.

Names and shapes are pinned by ``docs/contract.md``; fields may be added, never renamed. What a
client reads of a run (``RunState``, ``RunResult`` and their parts) is defined in
:mod:`workflows.view_models` and re-exported here; the signals and updates in
:mod:`workflows.signals`, :mod:`workflows.client_models` and :mod:`workflows.conversation_models`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, cast

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from temporalio.contrib.workflow_streams import WorkflowStreamState

from activities.contracts import ClientToolDef
from activities.evals.contracts import Recording
from activities.spec import PinnedSpec
from activities.spec_settings import MAX_RUN_SECONDS
from workflows.client_models import MAX_TOOL_RESULT_BYTES as MAX_TOOL_RESULT_BYTES
from workflows.client_models import ToolResultAnswer as ToolResultAnswer
from workflows.client_models import ToolResultUpdate as ToolResultUpdate
from workflows.conversation_models import AddMessageResult as AddMessageResult
from workflows.conversation_models import AddMessageUpdate as AddMessageUpdate
from workflows.run_parts import (
    PART_OF,
    Approvals,
    Budget,
    ClientCalls,
    Control,
    Delegation,
    Guards,
    HeldCalls,
    PersonWaits,
    Transcript,
    Visibility,
    flatten,
    nest,
)
from workflows.signals import (
    MAX_DECISION_ARGUMENTS_BYTES as MAX_DECISION_ARGUMENTS_BYTES,
)
from workflows.signals import (
    ApproveSignal as ApproveSignal,
)
from workflows.signals import (
    DecideResult as DecideResult,
)
from workflows.signals import (
    DecideUpdate as DecideUpdate,
)
from workflows.signals import (
    InterruptSignal as InterruptSignal,
)
from workflows.signals import (
    MessageSignal as MessageSignal,
)
from workflows.signals import (
    PrincipalSignal as PrincipalSignal,
)
from workflows.signals import (
    RaiseBudgetSignal as RaiseBudgetSignal,
)
from workflows.signals import (
    RejectSignal as RejectSignal,
)
from workflows.signals import (
    SignedDecision as SignedDecision,
)
from workflows.view_models import (
    WORKFLOW_NAME as WORKFLOW_NAME,
)
from workflows.view_models import (
    ChildRecord as ChildRecord,
)
from workflows.view_models import (
    Decision as Decision,
)
from workflows.view_models import (
    IgnoredSignal as IgnoredSignal,
)
from workflows.view_models import (
    LiveStatus as LiveStatus,
)
from workflows.view_models import (
    PendingApproval as PendingApproval,
)
from workflows.view_models import (
    PlanStepView as PlanStepView,
)
from workflows.view_models import (
    PlanView as PlanView,
)
from workflows.view_models import (
    RunResult as RunResult,
)
from workflows.view_models import (
    RunState as RunState,
)
from workflows.view_models import (
    RunStatus as RunStatus,
)
from workflows.view_models import (
    ToolCallRecord as ToolCallRecord,
)
from workflows.view_models import (
    ToolCallStatus as ToolCallStatus,
)


class LimitsOverride(BaseModel):
    """Per-run overrides of the spec's limits; ``None`` keeps the spec's value.

    ``max_seconds`` is finite and at most :data:`activities.spec_settings.MAX_RUN_SECONDS` (10 years).
    """

    max_turns: int | None = Field(default=None, ge=1)
    max_seconds: float | None = Field(default=None, gt=0, le=MAX_RUN_SECONDS, allow_inf_nan=False)
    max_total_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)


MAX_NAME_CHARS = 512
"""Longest agent name, tenant, principal or parent run id a request may carry: each is shown as a
Keyword search attribute, whose values the Temporal server limits to 2,048 bytes
(``limit.maxSearchAttributeValueSize``); 512 characters are at most 2,048 bytes of UTF-8."""


class RunRequest(BaseModel):
    """Input of ``AgentRun`` (docs/contract.md).

    ``agent``, ``tenant_id``, ``principal_id`` and ``parent_run_id`` are at most
    :data:`MAX_NAME_CHARS` characters.
    """

    agent: str = Field(default="default", max_length=MAX_NAME_CHARS)
    input: str
    tenant_id: str = Field(default="default", max_length=MAX_NAME_CHARS)
    principal_id: str = Field(default="anonymous", max_length=MAX_NAME_CHARS)
    roles: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="the principal's roles as the edge that authenticated it states them (the "
        "console: the identity's roles); Cedar policies read them (docs/policy.md)",
    )
    mode: Literal["task", "chat"] = "task"
    limits: LimitsOverride = Field(default_factory=LimitsOverride)
    spec_file: str | None = Field(
        default=None, description="spec file on the worker; None: AGENT_SPEC_FILE"
    )
    model: str | None = Field(default=None, description="override of the spec's model")
    parent_run_id: str | None = Field(
        default=None,
        max_length=MAX_NAME_CHARS,
        description="fork lineage: the run this one forked from",
    )
    fork_turn: int | None = None
    seed_messages: list[dict[str, Any]] | None = Field(
        default=None, description="fork: transcript to start from instead of [system, user(input)]"
    )
    input_id: str | None = Field(
        default=None,
        max_length=MAX_NAME_CHARS,
        description="the front end's id of the input message (AG-UI): an add_message of the "
        "same message_id is not added again",
    )
    carry: RunData | None = Field(
        default=None, description="set by the run itself when it continues as new"
    )
    tools: list[str] | None = Field(
        default=None,
        description="offer only these of the spec's tools, in this order (evaluation cases); "
        "None: all, in the spec's order",
    )
    client_tools: list[ClientToolDef] | None = Field(
        default=None,
        max_length=64,
        description="tools the client runs, sent by the front end ({name, description, "
        "parameters}); pinned with the spec's tools, their results come by update tool_result",
    )
    recorded_tools: Recording | None = Field(
        default=None,
        description="a replay: tool calls answered from these recorded calls, not run "
        "(ToolCallRecord.recorded; activities/evals/contracts.py Recording); None: tools run",
    )


class RunData(BaseModel):
    """Everything a run knows: one model, carried whole through continue-as-new.

    The continued execution gets it back as ``RunRequest.carry``. Fields marked ``exclude=True``
    belong to one execution and are not carried: at a turn boundary nothing is pending, no
    interrupt is set and the next execution counts tokens afresh. The ``state`` query, the Web UI
    details and ``RunResult`` are views of it (:mod:`workflows.state`); adding a field here or to
    a part is enough to carry it.

    Owned parts (:mod:`workflows.run_parts`), each changed by exactly one module, its owner; the
    others call the owner's small functions instead of writing the fields, and any module may
    read any part (``tests/unit/test_run_parts_owners.py`` checks who writes):

    - ``transcript`` (messages, compactions, token_counts, tools_tokens, parse_failures):
      :mod:`workflows.transcript`;
    - ``approvals`` (decisions, pending, verdicts, unconfirmed, parked): :mod:`workflows.approvals`;
    - ``person_waits`` (waited_seconds, waits): :mod:`workflows.run_context`
      (``RunContext.wait_for_person``);
    - ``budget`` (usage, max_total_tokens, max_cost_usd, max_sandbox_seconds, sandbox_seconds,
      model_steps, budget_paused): :mod:`workflows.charges`;
    - ``visibility`` (sa_shown, search_attributes, sa_upserted_at): :mod:`workflows.run_context`
      (``RunContext.show_in_listings``, ``shown_at_start``, ``upsert_search_attributes``);
    - ``delegation`` (children, lineage, child_pending, handoff_to): :mod:`workflows.children`;
    - ``held`` (tools_first): :class:`workflows.model_step.ToolsFirst`;
    - ``client_calls`` (client_waiting, client_results): :mod:`workflows.client_tools`;
    - ``guards`` (guardrails, guardrail_blocked, guardrail_paused): :mod:`workflows.guardrails`;
    - ``control`` (inbox, paused, interrupt): :mod:`workflows.control`.

    The wire shape stays flat: the carry JSON holds every part's fields at the top level under
    the names (and in the order) stored histories use; :meth:`_nest` reads flat keys into parts,
    :meth:`_flatten` writes them out flat (docs/rundata-parts.md lists old name -> new path).
    """

    pinned: PinnedSpec | None = None
    turn: int = 0
    tool_calls: list[ToolCallRecord] = Field(default_factory=list[ToolCallRecord])
    memory: list[str] = Field(default_factory=list)
    ignored_signals: list[IgnoredSignal] = Field(default_factory=list[IgnoredSignal])
    signatures: list[tuple[tuple[str, str], ...]] = Field(
        default_factory=list[tuple[tuple[str, str], ...]],
        description="loop-detection signature of each turn with tool calls",
    )
    started_at: datetime
    run_files: dict[str, str] = Field(
        default_factory=dict,
        description="files sandboxed calls wrote: name -> payload store key (the latest wins)",
    )
    continued_runs: int = 0
    output: str | None = None
    plan: PlanView | None = Field(
        default=None, description="plan mode: the plan and its steps' status"
    )
    events: WorkflowStreamState | None = Field(
        default=None,
        description="the event stream's retained items (workflows.events.RunEvents.carry)",
    )
    replayed: list[int] = Field(
        default_factory=list[int],
        description="a replay: indexes of the RunRequest.recorded_tools calls that answered",
    )
    model_arguments: bool = Field(
        default=False,
        description="patch model-arguments (ToolCallRecord.run_arguments); carried, so a "
        "continued run keeps its first run's recording",
    )
    tools_in_step: bool = Field(
        default=False,
        description="patch tools-in-model-step: allowed local tools' calls ride the next model "
        "step (workflows/model_step.py, ToolsFirst); carried, so a continued run keeps its first run's path",
    )
    transcript: Transcript = Field(default_factory=Transcript)
    approvals: Approvals = Field(default_factory=Approvals)
    person_waits: PersonWaits = Field(default_factory=PersonWaits)
    budget: Budget = Field(default_factory=Budget)
    visibility: Visibility = Field(default_factory=Visibility)
    delegation: Delegation = Field(default_factory=Delegation)
    held: HeldCalls = Field(default_factory=HeldCalls)
    client_calls: ClientCalls = Field(default_factory=ClientCalls)
    guards: Guards = Field(default_factory=Guards)
    control: Control = Field(default_factory=Control)
    # one execution only (not carried)
    req: RunRequest | None = Field(default=None, exclude=True)
    status: LiveStatus | RunStatus = Field(default="starting", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _nest(cls, data: Any) -> Any:
        """Flat keys (the carry JSON's) into their parts (:func:`workflows.run_parts.nest`)."""
        return nest(data)

    @model_serializer(mode="wrap")
    def _flatten(self, handler: SerializerFunctionWrapHandler) -> Any:
        """The parts' fields back at the top level, in the stored order (``flatten``)."""
        dumped: Any = handler(self)
        return flatten(cast("dict[str, Any]", dumped)) if isinstance(dumped, dict) else dumped

    def get_flat(self, name: str) -> Any:
        """The field ``name`` as the flat wire shape names it, from the part holding it."""
        part = PART_OF.get(name)
        return getattr(getattr(self, part) if part else self, name)


CarriedState = RunData
"""The name under which the run state travels in ``RunRequest.carry`` (kept for readers)."""


RunRequest.model_rebuild()
RunData.model_rebuild()
