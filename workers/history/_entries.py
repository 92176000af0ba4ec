"""The audit of a run as data: :class:`Audit` and the entries of its timeline.

Each entry marks one event of the history (``time``, ``run_id``, ``event_id``); ``kind`` tells
them apart in JSON (``agentctl audit --json`` prints ``Audit.model_dump_json()``).
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field

from activities.contracts import Usage
from workflows.models import RunResult

__all__ = [
    "ActivityEntry",
    "ApprovalRequestedEntry",
    "AskedToolCall",
    "Audit",
    "ContinuedAsNewEntry",
    "DecisionEntry",
    "GuardrailEntry",
    "ModelStepEntry",
    "RunFinishedEntry",
    "RunStartedEntry",
    "SignalEntry",
    "SpecResolvedEntry",
    "TimelineEntry",
    "ToolCallEntry",
]


class _Entry(BaseModel):
    """Common fields of every timeline entry."""

    time: str = Field(description="ISO-8601 UTC time of the event that marks the entry")
    run_id: str = Field(description="Temporal run id of the execution holding the event")
    event_id: int = Field(description="id of that event in the execution's history")


class RunStartedEntry(_Entry):
    """An execution started: the first one of the run, or one continued as new."""

    kind: Literal["run_started"] = "run_started"
    workflow_id: str
    agent: str
    input: str
    tenant_id: str
    principal_id: str
    mode: str = "task"
    model: str | None = Field(default=None, description="model override of the request, if any")
    task_queue: str = ""
    identity: str = Field(default="", description="Temporal client identity that started it")
    parent_run_id: str | None = None
    fork_turn: int | None = None
    seeded_messages: int = Field(default=0, description="messages of the fork seed (0: not a fork)")
    continued_from: str | None = Field(
        None, description="previous execution's run id (continue-as-new)"
    )
    turn: int = Field(
        default=0, description="turns already taken when it started (continue-as-new)"
    )


_E = TypeVar("_E", bound=_Entry)


class SpecResolvedEntry(_Entry):
    """The agent spec was resolved and pinned into the run (activity ``spec.resolve``)."""

    kind: Literal["spec_resolved"] = "spec_resolved"
    status: str = "completed"
    agent: str = ""
    model: str = ""
    spec_hash: str = ""
    tools: list[str] = Field(default_factory=list)
    error: str | None = None


class AskedToolCall(BaseModel):
    """A tool call as the model wrote it. ``arguments`` is the model's raw JSON text."""

    id: str
    name: str
    arguments: str = "{}"


class ModelStepEntry(_Entry):
    """One model step (activity ``model.complete``); ``time`` is when it was scheduled.

    ``latency_ms`` is milliseconds from scheduled to closed (all attempts and retry backoff
    included); ``http_latency_ms`` the last attempt's HTTP call as the activity measured it.
    Tokens are whole tokens as the model server reported them.
    """

    kind: Literal["model_step"] = "model_step"
    turn: int
    model: str
    status: Literal[
        "scheduled", "cancel_requested", "completed", "failed", "timed_out", "cancelled"
    ] = "scheduled"
    attempts: int = 0
    messages: int = Field(default=0, description="messages sent to the model")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float | None = None
    http_latency_ms: float | None = None
    finish_reason: str | None = None
    content: str | None = Field(default=None, description="the assistant's text, if any")
    tool_calls: list[AskedToolCall] = Field(default_factory=list)
    error: str | None = None
    completed_at: str | None = None


class ApprovalRequestedEntry(_Entry):
    """The policy asked a person to approve a tool call (derived from the pinned policy)."""

    kind: Literal["approval_requested"] = "approval_requested"
    turn: int
    tool_call_id: str
    name: str
    arguments: dict[str, Any] | str
    approvers: list[str] = Field(default_factory=list)
    reason: str = ""


class ToolCallEntry(_Entry):
    """One tool call of the run.

    ``time`` is when its activity was scheduled, or, for a call that never ran, when it was
    settled (model reply for ``denied``, decision for ``rejected``/``timed_out``).

    ``status`` is the final one (docs/contract.md: ``ok``, ``error``, ``rejected``, ``denied``,
    ``timed_out``, or ``pending``/``awaiting_approval``/``running``/``cancelled``).
    ``result_chars`` is the untruncated result size in characters; ``duration_ms`` the tool
    function's wall time in milliseconds; ``latency_ms`` milliseconds from scheduled to closed.
    ``arguments`` are the ones it ran with (a person may have edited them at approval);
    ``requested_arguments`` the model's.
    """

    kind: Literal["tool_call"] = "tool_call"
    turn: int
    tool_call_id: str
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    requested_arguments: dict[str, Any] | str | None = None
    status: str = "pending"
    policy: str = "allow"
    policy_reason: str | None = None
    policy_id: str | None = None
    decided_by: str | None = None
    ran: bool = False
    attempts: int = 0
    result_chars: int | None = None
    truncated: bool = False
    duration_ms: float | None = None
    latency_ms: float | None = None
    error: str | None = None
    result: str | None = Field(
        default=None,
        description="the tool message the model was given (ToolOutcome.content, as redacted "
        "and cut by the tool step) of a call that ran and returned; None otherwise",
    )


class DecisionEntry(_Entry):
    """An approve/reject decision: a signal, an update ``decide``, the approval timer or the judge.

    ``accepted`` is whether it decided the call; ``ignored_reason`` says why not, as the
    workflow would record it (derived from the history with the run's pinned policy, checked
    against the state carried across continue-as-new when there is one). ``who`` is the
    principal named in the payload; ``identity`` the Temporal client identity that sent it.
    """

    kind: Literal["decision"] = "decision"
    via: Literal["signal", "update", "timer", "judge"]
    decision: Literal["approve", "reject", "timeout"]
    tool_call_id: str
    who: str
    identity: str = ""
    arguments: dict[str, Any] | None = None
    comment: str | None = None
    accepted: bool
    ignored_reason: str | None = None
    update_id: str | None = None


class SignalEntry(_Entry):
    """Any other signal: ``interrupt``, ``pause``, ``resume``, ``send_message``, ``raise_budget``.

    ``accepted`` is ``None`` when the history alone cannot tell (``pause``/``resume`` around a
    budget pause); ``payload`` is the decoded signal argument.
    """

    kind: Literal["signal"] = "signal"
    name: str
    who: str = ""
    identity: str = ""
    payload: Any = None
    accepted: bool | None = True
    ignored_reason: str | None = None


class ActivityEntry(_Entry):
    """Another activity (e.g. ``tokens.count`` for context compaction)."""

    kind: Literal["activity"] = "activity"
    activity_type: str
    status: str = "scheduled"
    attempts: int = 0
    latency_ms: float | None = None
    error: str | None = None


class ContinuedAsNewEntry(_Entry):
    """The execution continued as new (history size bound); the run goes on in ``new_run_id``."""

    kind: Literal["continued_as_new"] = "continued_as_new"
    new_run_id: str
    turn: int = 0


class RunFinishedEntry(_Entry):
    """The run ended.

    ``status`` is ``RunResult.status`` when the workflow returned a result, else the Temporal
    outcome (``workflow_failed``, ``terminated``, ``cancelled``, ``timed_out``).
    """

    kind: Literal["run_finished"] = "run_finished"
    status: str
    stopped_reason: str = ""
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    output: str | None = None
    error: str | None = None
    duration_ms: float | None = None


class GuardrailEntry(_Entry):
    """A guardrail tripped (docs/guardrails.md).

    Read from the activity that checked the text: ``guardrail.check`` (stage ``input``), ``tool.invoke`` or a model step's held calls
    (``tool_results``), ``model.complete`` (``output``). ``detail`` never holds what was found.
    """

    kind: Literal["guardrail_tripped"] = "guardrail_tripped"
    turn: int = 0
    stage: str
    guardrail: str
    action: str
    detail: str = ""
    tool_call_id: str | None = None


TimelineEntry = Annotated[
    RunStartedEntry
    | SpecResolvedEntry
    | ModelStepEntry
    | ApprovalRequestedEntry
    | ToolCallEntry
    | DecisionEntry
    | SignalEntry
    | ActivityEntry
    | ContinuedAsNewEntry
    | GuardrailEntry
    | RunFinishedEntry,
    Field(discriminator="kind"),
]


class _Kind(Generic[_E]):
    """A read-only attribute of :class:`Audit`: its timeline's entries of one kind, in order."""

    def __init__(self, kind: type[_E], doc: str) -> None:
        self.kind = kind
        self.__doc__ = doc

    @overload
    def __get__(self, audit: None, owner: type[Audit] | None = None) -> _Kind[_E]: ...
    @overload
    def __get__(self, audit: Audit, owner: type[Audit] | None = None) -> list[_E]: ...
    def __get__(self, audit: Audit | None, owner: type[Audit] | None = None) -> Any:
        return self if audit is None else audit.entries(self.kind)


class Audit(BaseModel):
    """What a run did, from its history: identity, lineage, outcome and a timeline.

    ``timeline`` is in history order (which is time order), across every execution of the
    continue-as-new chain that was read (``run_ids``, oldest first). ``chain_complete`` is False
    when the first history read is not the chain's first execution. ``status`` is the final
    ``RunResult.status``, ``running`` while the run is open, or the Temporal outcome when the
    workflow did not return a result. ``events`` counts the history events read, ``actions`` the
    Temporal Cloud actions they show (by kind, summed over the executions read).
    """

    model_config = ConfigDict(ignored_types=(_Kind,))

    workflow_id: str
    run_ids: list[str]
    chain_complete: bool = True
    agent: str = ""
    input: str = ""
    tenant_id: str = "default"
    principal_id: str = "anonymous"
    parent_run_id: str | None = None
    fork_turn: int | None = None
    status: str = "running"
    result: RunResult | None = None
    events: int = 0
    actions: dict[str, int] = Field(
        default_factory=dict,
        description="Temporal Cloud actions the histories read show, by kind, and 'total' "
        "(workers.history.billable_actions)",
    )
    timeline: list[TimelineEntry] = Field(default_factory=list)

    def entries(self, kind: type[_E]) -> list[_E]:
        """The timeline's entries of one kind (a class, e.g. :class:`ModelStepEntry`), in order."""
        return [e for e in self.timeline if isinstance(e, kind)]

    model_steps = _Kind(ModelStepEntry, "The model steps, in order.")
    tool_calls = _Kind(ToolCallEntry, "The tool calls, in timeline order.")
    decisions = _Kind(
        DecisionEntry, "Every approve/reject (accepted or ignored) and approval timeout, in order."
    )
    signals = _Kind(SignalEntry, "The other signals, in order.")
    guardrails = _Kind(GuardrailEntry, "The guardrails that tripped, in order.")

    @property
    def ignored(self) -> list[DecisionEntry | SignalEntry]:
        """Decisions and signals that changed nothing."""
        return [
            e
            for e in self.timeline
            if isinstance(e, DecisionEntry | SignalEntry) and e.accepted is False
        ]
