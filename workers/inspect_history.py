"""See, audit, replay and fork runs, from their Temporal event histories.

A run's history is the authoritative record of what happened: every model step and tool call is
an activity (inputs and results as JSON payloads), every signal and accepted update is an event.
This module reads it without running any workflow code:

* :func:`fetch_history` / :func:`fetch_chain`: the history of a run's latest execution, or of
  every execution of its continue-as-new chain (oldest first).
* :func:`audit`: a typed timeline (:class:`Audit`) of model steps, tool calls, decisions, other
  signals and the outcome; :func:`render_audit_text` prints it, ``Audit.model_dump_json()`` is the
  JSON form (``agentctl audit RUN_ID [--json]``).
* :func:`replay` / :func:`replay_file`: replay recorded histories with the *current* workflow
  code (``temporalio.worker.Replayer``) to find nondeterministic changes before they break runs
  in flight (``agentctl replay RUN_ID`` / ``--file PATH``).
* :func:`fork`: start a new run seeded with the transcript a run's model saw at step K, optionally
  with an edited user message or another model (``agentctl fork RUN_ID --turn K``).

Payloads are JSON (pydantic data converter, CONTRACT.md). Large ones may sit in external payload
storage, the history holding only a reference: :func:`inline_payloads` resolves references (and
applies a payload codec) with the client's data converter before :func:`audit` reads them;
:func:`audit_run`, :func:`fork` and :func:`replay` do that themselves.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel, Field, ValidationError
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter

from activities.contracts import (
    MODEL_COMPLETE,
    SPEC_RESOLVE,
    TOOL_INVOKE,
    ToolInfo,
    Usage,
)
from activities.spec import PinnedSpec, Policy
from workflows.models import RunRequest, RunResult
from workflows.policy import evaluate, may_decide, parse_arguments

__all__ = [
    "ActivityEntry",
    "Audit",
    "ContinuedAsNewEntry",
    "DecisionEntry",
    "ForkError",
    "ModelStepEntry",
    "ReplayReport",
    "RunFinishedEntry",
    "RunStartedEntry",
    "SignalEntry",
    "SpecResolvedEntry",
    "ToolCallEntry",
    "ApprovalRequestedEntry",
    "audit",
    "audit_run",
    "inline_payloads",
    "load_history_file",
    "fetch_chain",
    "fetch_history",
    "fork",
    "fork_points",
    "lineage",
    "render_audit_text",
    "replay",
    "replay_file",
    "replay_histories",
]

MAX_CHAIN = 1000
"""Executions at most that :func:`fetch_chain` walks back through (a guard against cycles)."""

# ---------------------------------------------------------------------------------- fetching


async def fetch_history(
    client: Client, run_id: str, *, execution_run_id: str | None = None
) -> WorkflowHistory:
    """The event history of one execution of run ``run_id`` (a workflow id).

    Args:
        client: a connected client.
        run_id: the run's workflow id (``run-<uuid4>``).
        execution_run_id: a Temporal run id of one execution of the chain; ``None``: the latest
            execution (after continue-as-new, only the newest one: see :func:`fetch_chain`).

    Raises:
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    return await client.get_workflow_handle(run_id, run_id=execution_run_id).fetch_history()


async def fetch_chain(
    client: Client, run_id: str, *, max_runs: int = MAX_CHAIN
) -> list[WorkflowHistory]:
    """The histories of every execution of run ``run_id``'s continue-as-new chain, oldest first.

    Starts from the latest execution and follows ``continued_execution_run_id`` of each start
    event back to the first one (at most ``max_runs`` executions; older ones are left out, which
    :attr:`Audit.chain_complete` reports). A run that never continued as new gives one history.

    Raises:
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    latest = await fetch_history(client, run_id)
    chain = [latest]
    while len(chain) < max_runs:
        prev = _started(chain[0]).continued_execution_run_id
        if not prev:
            break
        chain.insert(0, await fetch_history(client, run_id, execution_run_id=prev))
    return chain


def _started(history: WorkflowHistory) -> Any:
    if not history.events or not history.events[0].HasField(
        "workflow_execution_started_event_attributes"
    ):
        raise ValueError(
            f"history of {history.workflow_id} does not begin with WorkflowExecutionStarted"
        )
    return history.events[0].workflow_execution_started_event_attributes


# ---------------------------------------------------------------------------------- audit model


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
    model: str | None = Field(None, description="model override of the request, if any")
    task_queue: str = ""
    identity: str = Field("", description="Temporal client identity that started it")
    parent_run_id: str | None = None
    fork_turn: int | None = None
    seeded_messages: int = Field(0, description="messages of the fork seed (0: not a fork)")
    continued_from: str | None = Field(
        None, description="previous execution's run id (continue-as-new)"
    )
    turn: int = Field(0, description="turns already taken when it started (continue-as-new)")


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
    messages: int = Field(0, description="messages sent to the model")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float | None = None
    http_latency_ms: float | None = None
    finish_reason: str | None = None
    content: str | None = Field(None, description="the assistant's text, if any")
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

    ``status`` is the final one (CONTRACT.md: ``ok``, ``error``, ``rejected``, ``denied``,
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
    decided_by: str | None = None
    ran: bool = False
    attempts: int = 0
    result_chars: int | None = None
    truncated: bool = False
    duration_ms: float | None = None
    latency_ms: float | None = None
    error: str | None = None


class DecisionEntry(_Entry):
    """An approve/reject decision: a signal, an update ``decide``, or the approval timer.

    ``accepted`` is whether it decided the call; ``ignored_reason`` says why not, as the
    workflow would record it (derived from the history with the run's pinned policy, checked
    against the state carried across continue-as-new when there is one). ``who`` is the
    principal named in the payload; ``identity`` the Temporal client identity that sent it.
    """

    kind: Literal["decision"] = "decision"
    via: Literal["signal", "update", "timer"]
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
    | RunFinishedEntry,
    Field(discriminator="kind"),
]


class Audit(BaseModel):
    """What a run did, from its history: identity, lineage, outcome and a timeline.

    ``timeline`` is in history order (which is time order), across every execution of the
    continue-as-new chain that was read (``run_ids``, oldest first). ``chain_complete`` is False
    when the first history read is not the chain's first execution. ``status`` is the final
    ``RunResult.status``, ``running`` while the run is open, or the Temporal outcome when the
    workflow did not return a result. ``events`` counts the history events read.
    """

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
    timeline: list[TimelineEntry] = Field(default_factory=list)

    @property
    def model_steps(self) -> list[ModelStepEntry]:
        """The model steps, in order."""
        return [e for e in self.timeline if isinstance(e, ModelStepEntry)]

    @property
    def tool_calls(self) -> list[ToolCallEntry]:
        """The tool calls, in timeline order."""
        return [e for e in self.timeline if isinstance(e, ToolCallEntry)]

    @property
    def decisions(self) -> list[DecisionEntry]:
        """Every approve/reject (accepted or ignored) and approval timeout, in order."""
        return [e for e in self.timeline if isinstance(e, DecisionEntry)]

    @property
    def signals(self) -> list[SignalEntry]:
        """The other signals, in order."""
        return [e for e in self.timeline if isinstance(e, SignalEntry)]

    @property
    def ignored(self) -> list[DecisionEntry | SignalEntry]:
        """Decisions and signals that changed nothing."""
        return [
            e
            for e in self.timeline
            if isinstance(e, DecisionEntry | SignalEntry) and e.accepted is False
        ]


# ---------------------------------------------------------------------------------- decoding


def _iso(event: HistoryEvent) -> str:
    return _dt(event).isoformat(timespec="milliseconds")


def _dt(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


def _ms(start: HistoryEvent, end: HistoryEvent) -> float:
    return round((_dt(end) - _dt(start)).total_seconds() * 1000, 1)


def _decode(converter: DataConverter, payloads: Any) -> list[Any]:
    """Decode a ``Payloads`` message into plain Python values (dicts for JSON objects)."""
    items = list(payloads.payloads) if payloads is not None else []
    if not items:
        return []
    try:
        return list(converter.payload_converter.from_payloads(items, None))
    except Exception as e:  # noqa: BLE001 - an unreadable payload must not stop the audit
        return [f"<undecodable payload: {e}>"]


def _first(converter: DataConverter, payloads: Any) -> Any:
    values = _decode(converter, payloads)
    return values[0] if values else None


_REFERENCE_TYPES = {b"temporal.api.sdk.v1.ExternalStorageReference"}
_LEGACY_REFERENCE_ENCODING = b"json/external-storage-reference"


def _is_reference(p: Payload) -> bool:
    meta = p.metadata
    return meta.get("messageType", b"") in _REFERENCE_TYPES or (
        meta.get("encoding", b"") == _LEGACY_REFERENCE_ENCODING
    )


def _repeated(fd: FieldDescriptor) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 5.28; ``label`` is gone in 7
    if flag is not None:
        return bool(flag)
    return fd.label == FieldDescriptor.LABEL_REPEATED  # type: ignore[attr-defined]


def _payloads_in(msg: Message) -> Iterator[Payloads]:
    """Every ``Payloads`` message inside ``msg`` (recursively; map fields are skipped)."""
    for fd, value in msg.ListFields():
        mt = fd.message_type
        if mt is None or mt.GetOptions().map_entry:
            continue
        items = list(value) if _repeated(fd) else [value]
        for item in items:
            if mt.full_name == Payloads.DESCRIPTOR.full_name:
                yield item
            else:
                yield from _payloads_in(item)


async def inline_payloads(
    histories: WorkflowHistory | Sequence[WorkflowHistory], data_converter: DataConverter
) -> list[WorkflowHistory]:
    """Copies of the histories whose payloads are plain JSON, ready for :func:`audit`.

    External-storage references are resolved and a payload codec is applied with
    ``data_converter`` (the client's: ``client.data_converter``); each payload is decoded and
    re-encoded as plain JSON. Returns the histories unchanged when the converter has neither
    external storage nor a codec. A payload that cannot be resolved (e.g. its stored file was
    removed) is left as it is, and the audit shows it as undecodable.
    """
    chain = [histories] if isinstance(histories, WorkflowHistory) else list(histories)
    codec = data_converter.payload_codec is not None
    if data_converter.external_storage is None and not codec:
        return chain
    plain = pydantic_data_converter.payload_converter
    out: list[WorkflowHistory] = []
    for h in chain:
        events: list[HistoryEvent] = []
        for ev in h.events:
            copy_ev = HistoryEvent()
            copy_ev.CopyFrom(ev)
            for p in _payloads_in(copy_ev):
                if not codec and not any(_is_reference(x) for x in p.payloads):
                    continue
                try:
                    values = await data_converter.decode(list(p.payloads))
                    new = plain.to_payloads(values)
                except Exception:  # noqa: BLE001 - keep the payload as recorded
                    continue
                del p.payloads[:]
                p.payloads.extend(new)
            events.append(copy_ev)
        out.append(WorkflowHistory(h.workflow_id, events))
    return out


async def audit_run(client: Client, run_id: str) -> Audit:
    """Fetch every execution of run ``run_id``, resolve its payloads and :func:`audit` it.

    Raises:
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    chain = await inline_payloads(await fetch_chain(client, run_id), client.data_converter)
    return audit(chain)


def _failure_text(failure: Any) -> str:
    parts: list[str] = []
    f = failure
    while f is not None and len(parts) < 5:
        if f.message:
            parts.append(f.message)
        f = f.cause if f.HasField("cause") else None
    return ": ".join(parts) or "failed"


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------------------------- auditor


class _Auditor:
    """Walks a chain of histories and builds the timeline, following the workflow's rules."""

    def __init__(self, converter: DataConverter, chain_complete: bool) -> None:
        self.conv = converter
        self.chain_complete = chain_complete
        self.timeline: list[Any] = []
        self.req: dict[str, Any] = {}
        self.pinned: PinnedSpec | None = None
        self.tools: dict[str, ToolCallEntry] = {}  # every tool call of the run, by id
        self.result: RunResult | None = None
        self.status = "running"
        self.events = 0
        self.paused = False
        self.interrupted = False
        # per execution (not carried across continue-as-new by the workflow)
        self.verdicts: dict[str, str] = {}
        self.pending: dict[str, list[str]] = {}
        self.scheduled: dict[int, tuple[HistoryEvent, Any]] = {}
        self.started_attempts: dict[int, int] = {}

    # -- helpers

    def _policy(self) -> Policy:
        return self.pinned.spec.policy if self.pinned else Policy()

    def _tool_info(self, name: str) -> ToolInfo | None:
        if self.pinned is None:
            return None
        return next((t for t in self.pinned.tools if t.name == name), None)

    def _budget_may_pause(self) -> bool:
        return self.pinned is not None and self.pinned.spec.limits.on_budget == "pause"

    def _decision_problem(self, call_id: str, principal: str) -> str | None:
        """Why a decision cannot be taken now (as ``AgentRun._decision_problem``), or None."""
        if call_id in self.verdicts:
            return f"tool call {call_id} was already decided ({self.verdicts[call_id]})"
        approvers = self.pending.get(call_id)
        if approvers is None:
            known = call_id in self.tools
            return f"tool call {call_id} is {'not waiting for approval' if known else 'unknown'}"
        allowed, why = may_decide(self._policy(), approvers, principal)
        return None if allowed else why

    def _settle(
        self,
        call_id: str,
        decision: str,
        who: str,
        arguments: dict[str, Any] | None,
        ev: HistoryEvent,
        run_id: str,
    ) -> None:
        self.verdicts[call_id] = decision
        rec = self.tools.get(call_id)
        if rec is None:
            return
        if decision != "timeout":
            rec.decided_by = who
        if decision == "approve":
            if arguments is not None:
                rec.arguments = arguments
            rec.status = "approved"
        else:
            rec.status = "rejected" if decision == "reject" else "timed_out"
            rec.time, rec.event_id, rec.run_id = _iso(ev), ev.event_id, run_id
        if all(cid in self.verdicts for cid in self.pending):
            self.pending.clear()

    # -- the walk

    def walk(self, history: WorkflowHistory) -> None:
        self.verdicts, self.pending, self.scheduled, self.started_attempts = {}, {}, {}, {}
        run_id = history.run_id
        for ev in history.events:
            self.events += 1
            self._event(ev, run_id, history.workflow_id)

    def _event(self, ev: HistoryEvent, run_id: str, workflow_id: str) -> None:
        t = ev.event_type
        base = {"time": _iso(ev), "run_id": run_id, "event_id": ev.event_id}
        if t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            self._started(ev, base, workflow_id)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            self._scheduled(ev, base)
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED:
            sid = ev.activity_task_cancel_requested_event_attributes.scheduled_event_id
            found = self.scheduled.get(sid)
            if found is not None and isinstance(found[1], ModelStepEntry | ActivityEntry):
                if found[1].status == "scheduled":
                    found[1].status = "cancel_requested"
        elif t == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            a = ev.activity_task_started_event_attributes
            self.started_attempts[a.scheduled_event_id] = a.attempt
        elif t in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
            EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
        ):
            self._closed(ev, run_id)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            self._signal(ev, base, run_id)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            self._update_accepted(ev, base, run_id)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_REJECTED:
            self._update_rejected(ev, base)
        elif t == EventType.EVENT_TYPE_TIMER_FIRED:
            self._timer_fired(ev, base, run_id)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            self._continued(ev, base)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            self._completed(ev, base)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
            self._ended(
                base,
                "workflow_failed",
                _failure_text(ev.workflow_execution_failed_event_attributes.failure),
            )
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
            a = ev.workflow_execution_terminated_event_attributes
            self._ended(base, "terminated", a.reason or "terminated", who=a.identity)
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
            self._ended(base, "cancelled", "the workflow was cancelled")
        elif t == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
            self._ended(base, "timed_out", "the workflow execution timed out")

    def _started(self, ev: HistoryEvent, base: dict[str, Any], workflow_id: str) -> None:
        a = ev.workflow_execution_started_event_attributes
        req = _as_dict(_first(self.conv, a.input))
        carry = _as_dict(req.get("carry"))
        if not self.req:
            self.req = req
        turn = 0
        if carry:
            try:
                self.pinned = PinnedSpec.model_validate(carry.get("pinned"))
            except ValidationError:
                pass
            turn = int(carry.get("turn") or 0)
            self.paused = bool(carry.get("paused"))
            self._reconcile_carry(carry)
        self.timeline.append(
            RunStartedEntry(
                **base,
                workflow_id=a.workflow_id or workflow_id,
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

    def _scheduled(self, ev: HistoryEvent, base: dict[str, Any]) -> None:
        a = ev.activity_task_scheduled_event_attributes
        kind = a.activity_type.name
        inp = _as_dict(_first(self.conv, a.input))
        entry: Any
        if kind == MODEL_COMPLETE:
            entry = ModelStepEntry(
                **base,
                turn=int(inp.get("turn", 0)),
                model=str(inp.get("model", "")),
                messages=len(inp.get("messages") or []),
            )
        elif kind == TOOL_INVOKE:
            call_id = str(inp.get("call_id", ""))
            entry = self.tools.get(call_id)
            args = inp.get("arguments", {})
            parsed = parse_arguments(args) if isinstance(args, str | dict) else None
            if entry is None:  # a call the model step did not announce (should not happen)
                entry = ToolCallEntry(
                    **base,
                    turn=int(inp.get("turn", 0)),
                    tool_call_id=call_id,
                    name=str(inp.get("name", "")),
                )
                self.tools[call_id] = entry
                self.timeline.append(entry)
            entry.time, entry.event_id = base["time"], base["event_id"]
            entry.run_id = base["run_id"]
            entry.arguments = parsed if parsed is not None else args
            entry.status, entry.ran = "running", True
        elif kind == SPEC_RESOLVE:
            entry = SpecResolvedEntry(**base, status="scheduled", agent=str(inp.get("agent", "")))
        else:
            entry = ActivityEntry(**base, activity_type=kind)
        if kind != TOOL_INVOKE:
            self.timeline.append(entry)
        self.scheduled[ev.event_id] = (ev, entry)

    def _closed(self, ev: HistoryEvent, run_id: str) -> None:
        t = ev.event_type
        attrs: Any = getattr(ev, ev.WhichOneof("attributes") or "")
        found = self.scheduled.get(attrs.scheduled_event_id)
        if found is None:
            return
        sched, entry = found
        attempts = self.started_attempts.get(attrs.scheduled_event_id, 0)
        latency = _ms(sched, ev)
        status = {
            EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "completed",
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "failed",
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "timed_out",
            EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "cancelled",
        }[t]
        error = None
        if t in (
            EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED,
            EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        ):
            error = _failure_text(attrs.failure)
        result = _as_dict(_first(self.conv, attrs.result)) if status == "completed" else {}
        if isinstance(entry, ModelStepEntry):
            entry.status = status  # type: ignore[assignment]
            entry.attempts, entry.latency_ms, entry.error = attempts, latency, error
            entry.completed_at = _iso(ev)
            if result:
                self._model_reply(entry, result, ev, run_id)
        elif isinstance(entry, ToolCallEntry):
            entry.attempts, entry.latency_ms = attempts, latency
            if result:
                entry.status = str(result.get("status", "ok"))
                entry.result_chars = int(result.get("output_chars") or 0)
                entry.truncated = bool(result.get("truncated"))
                entry.duration_ms = result.get("duration_ms")
                if isinstance(result.get("arguments"), dict):
                    entry.arguments = result["arguments"]
            elif status == "cancelled":
                entry.status = "cancelled"
            else:
                msg = error or status
                entry.error = msg
                entry.status = (
                    "timed_out"
                    if status == "timed_out"
                    or "timeout" in msg.lower()
                    or "timed out" in msg.lower()
                    else "error"
                )
        elif isinstance(entry, SpecResolvedEntry):
            entry.status, entry.error = status, error
            if result:
                try:
                    self.pinned = PinnedSpec.model_validate(result)
                except ValidationError as e:
                    entry.error = f"unreadable pinned spec: {e.error_count()} error(s)"
                if self.pinned is not None:
                    entry.model = self.req.get("model") or self.pinned.spec.model
                    entry.spec_hash = self.pinned.spec_hash
                    entry.tools = [t.name for t in self.pinned.tools]
                    entry.agent = self.pinned.spec.name
        elif isinstance(entry, ActivityEntry):
            entry.status, entry.attempts, entry.latency_ms, entry.error = (
                status,
                attempts,
                latency,
                error,
            )

    def _model_reply(
        self, entry: ModelStepEntry, reply: dict[str, Any], ev: HistoryEvent, run_id: str
    ) -> None:
        usage = _as_dict(reply.get("usage"))
        entry.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        entry.completion_tokens = int(usage.get("completion_tokens") or 0)
        entry.total_tokens = int(usage.get("total_tokens") or 0)
        entry.cost_usd = float(usage.get("cost_usd") or 0.0)
        entry.http_latency_ms = reply.get("latency_ms")
        entry.finish_reason = reply.get("finish_reason")
        entry.content = reply.get("content")
        entry.tool_calls = [
            AskedToolCall.model_validate(c)
            for c in reply.get("tool_calls") or []
            if isinstance(c, dict)
        ]
        tenant = str(self.req.get("tenant_id", "default"))
        principal = str(self.req.get("principal_id", "anonymous"))
        base = {"time": _iso(ev), "run_id": run_id, "event_id": ev.event_id}
        for call in entry.tool_calls:
            decision = evaluate(
                self._policy(),
                self._tool_info(call.name),
                call.name,
                call.arguments,
                tenant,
                principal,
            )
            args = parse_arguments(call.arguments)
            rec = ToolCallEntry(
                **base,
                turn=entry.turn,
                tool_call_id=call.id,
                name=call.name,
                arguments=args if args is not None else call.arguments,
                requested_arguments=args if args is not None else call.arguments,
                policy=decision.action,
                policy_reason=decision.reason,
                status={"allow": "pending", "deny": "denied", "approve": "awaiting_approval"}[
                    decision.action
                ],
            )
            self.tools[call.id] = rec
            self.timeline.append(rec)
            if decision.action == "approve":
                self.pending[call.id] = list(decision.approvers)
                self.timeline.append(
                    ApprovalRequestedEntry(
                        **base,
                        turn=entry.turn,
                        tool_call_id=call.id,
                        name=call.name,
                        arguments=rec.arguments,
                        approvers=list(decision.approvers),
                        reason=decision.reason,
                    )
                )

    def _signal(self, ev: HistoryEvent, base: dict[str, Any], run_id: str) -> None:
        a = ev.workflow_execution_signaled_event_attributes
        payload = _first(self.conv, a.input)
        p = _as_dict(payload)
        who = str(p.get("principal_id", "anonymous"))
        name = a.signal_name
        if name in ("approve", "reject"):
            call_id = str(p.get("tool_call_id", ""))
            problem = self._decision_problem(call_id, who)
            args = (
                p.get("arguments")
                if name == "approve" and isinstance(p.get("arguments"), dict)
                else None
            )
            comment = p.get("comment") if name == "approve" else p.get("reason", "rejected")
            self.timeline.append(
                DecisionEntry(
                    **base,
                    via="signal",
                    decision=name,  # type: ignore[arg-type]
                    tool_call_id=call_id,
                    who=who,
                    identity=a.identity,
                    arguments=args,
                    comment=comment,
                    accepted=problem is None,
                    ignored_reason=problem,
                )
            )
            if problem is None:
                self._settle(call_id, name, who, args, ev, run_id)
            return
        accepted: bool | None = True
        why: str | None = None
        if name not in ("interrupt", "pause", "resume", "send_message", "raise_budget"):
            accepted = None  # no handler of that name in AgentRun
        elif name == "interrupt":
            if self.interrupted:
                accepted, why = False, "already interrupted"
            self.interrupted = True
        elif name in ("pause", "resume"):
            if name == "pause" and self.paused:
                accepted, why = False, "already paused"
            if name == "resume" and not self.paused:
                accepted, why = False, "not paused"
            if self._budget_may_pause():  # a budget pause is not visible in the history
                accepted, why = None, None
            self.paused = name == "pause"
        self.timeline.append(
            SignalEntry(
                **base,
                name=name,
                who=who,
                identity=a.identity,
                payload=payload,
                accepted=accepted,
                ignored_reason=why,
            )
        )

    def _update_accepted(self, ev: HistoryEvent, base: dict[str, Any], run_id: str) -> None:
        a = ev.workflow_execution_update_accepted_event_attributes
        req = a.accepted_request
        if req.input.name != "decide":
            return
        p = _as_dict(_first(self.conv, req.input.args))
        who = str(p.get("principal_id", "anonymous"))
        decision = str(p.get("decision", "approve"))
        call_id = str(p.get("tool_call_id", ""))
        args = (
            p.get("arguments")
            if decision == "approve" and isinstance(p.get("arguments"), dict)
            else None
        )
        comment = (
            p.get("comment") if decision == "approve" else (p.get("reason") or p.get("comment"))
        )
        self.timeline.append(
            DecisionEntry(
                **base,
                via="update",
                decision=decision,  # type: ignore[arg-type]
                tool_call_id=call_id,
                who=who,
                identity=req.meta.identity,
                arguments=args,
                comment=comment,
                accepted=True,
                update_id=req.meta.update_id or None,
            )
        )
        self._settle(call_id, decision, who, args, ev, run_id)

    def _update_rejected(self, ev: HistoryEvent, base: dict[str, Any]) -> None:
        a = ev.workflow_execution_update_rejected_event_attributes
        req = a.rejected_request
        if req.input.name != "decide":
            return
        p = _as_dict(_first(self.conv, req.input.args))
        self.timeline.append(
            DecisionEntry(
                **base,
                via="update",
                decision="reject" if p.get("decision") == "reject" else "approve",
                tool_call_id=str(p.get("tool_call_id", "")),
                who=str(p.get("principal_id", "anonymous")),
                identity=req.meta.identity,
                accepted=False,
                ignored_reason=_failure_text(a.failure),
                update_id=req.meta.update_id or None,
            )
        )

    def _timer_fired(self, ev: HistoryEvent, base: dict[str, Any], run_id: str) -> None:
        # While calls wait for approval the only timer is the approval timeout.
        waiting = [cid for cid in self.pending if cid not in self.verdicts]
        for cid in waiting:
            self.timeline.append(
                DecisionEntry(
                    **base,
                    via="timer",
                    decision="timeout",
                    tool_call_id=cid,
                    who="system",
                    accepted=True,
                )
            )
            self._settle(cid, "timeout", "system", None, ev, run_id)

    def _close_in_flight(self) -> None:
        """The execution closed: activities still open were abandoned (cancelled)."""
        for _, entry in self.scheduled.values():
            if isinstance(entry, ModelStepEntry | ActivityEntry | SpecResolvedEntry):
                if entry.status in ("scheduled", "cancel_requested"):
                    entry.status = "cancelled"
            elif isinstance(entry, ToolCallEntry) and entry.status == "running":
                entry.status = "cancelled"

    def _continued(self, ev: HistoryEvent, base: dict[str, Any]) -> None:
        self._close_in_flight()
        a = ev.workflow_execution_continued_as_new_event_attributes
        carry = _as_dict(_as_dict(_first(self.conv, a.input)).get("carry"))
        self._reconcile_carry(carry)
        self.status = "continued_as_new"
        self.timeline.append(
            ContinuedAsNewEntry(
                **base, new_run_id=a.new_execution_run_id, turn=int(carry.get("turn") or 0)
            )
        )

    def _completed(self, ev: HistoryEvent, base: dict[str, Any]) -> None:
        self._close_in_flight()
        raw = _first(self.conv, ev.workflow_execution_completed_event_attributes.result)
        try:
            res = RunResult.model_validate(raw)
        except ValidationError:
            self._ended(base, "completed", "result not readable as RunResult")
            return
        self.result = res
        self.status = res.status
        for rec in res.tool_calls:
            self._apply_record(rec.model_dump(), base)
        if isinstance(raw, dict) and isinstance(raw.get("ignored_signals"), list):
            self._reconcile_ignored(raw["ignored_signals"])  # when the workflow reports them
        self.timeline.append(
            RunFinishedEntry(
                **base,
                status=res.status,
                stopped_reason=res.stopped_reason,
                turns=res.turns,
                usage=res.usage,
                output=res.output,
                error=res.error,
                duration_ms=res.duration_ms,
            )
        )

    def _ended(self, base: dict[str, Any], status: str, reason: str, who: str = "") -> None:
        self._close_in_flight()
        self.status = status
        self.timeline.append(
            RunFinishedEntry(
                **base, status=status, stopped_reason=reason, error=(f"by {who}" if who else None)
            )
        )
        for rec in self.tools.values():
            if rec.status in ("pending", "running", "awaiting_approval", "approved"):
                rec.status = "cancelled"

    # -- authoritative state written by the workflow itself

    def _apply_record(self, r: dict[str, Any], base: dict[str, Any]) -> None:
        """Make a tool call entry agree with the workflow's own ``ToolCallRecord``."""
        call_id = str(r.get("id", ""))
        rec = self.tools.get(call_id)
        if rec is None:
            rec = ToolCallEntry(
                **base,
                turn=int(r.get("turn", 0)),
                tool_call_id=call_id,
                name=str(r.get("name", "")),
            )
            self.tools[call_id] = rec
            self.timeline.append(rec)
        rec.status = str(r.get("status", rec.status))
        rec.policy = str(r.get("policy", rec.policy))
        rec.decided_by = r.get("decided_by") or rec.decided_by
        if r.get("reason") and rec.status in ("error", "timed_out") and not rec.error:
            rec.error = r["reason"]
        if r.get("arguments") is not None:
            rec.arguments = r["arguments"]
        if rec.ran:
            rec.result_chars = int(r.get("result_chars") or rec.result_chars or 0)
            rec.duration_ms = r.get("duration_ms", rec.duration_ms)

    def _reconcile_carry(self, carry: dict[str, Any]) -> None:
        if not carry:
            return
        base = {
            "time": self.timeline[-1].time if self.timeline else "",
            "run_id": "",
            "event_id": 0,
        }
        for r in carry.get("tool_calls") or []:
            if isinstance(r, dict):
                if r.get("id") in self.tools:
                    self._apply_record(r, base)
                else:  # a call of an execution that was not read: known, for "not waiting" checks
                    self.tools[str(r.get("id"))] = ToolCallEntry(
                        **base,
                        turn=int(r.get("turn", 0)),
                        tool_call_id=str(r.get("id")),
                        name=str(r.get("name", "")),
                    )
        self._reconcile_ignored(carry.get("ignored_signals") or [])

    def _reconcile_ignored(self, ignored: list[Any]) -> None:
        """Mark exactly the decisions/signals the workflow recorded as ignored (in order)."""
        recorded = [i for i in ignored if isinstance(i, dict)]
        if not self.chain_complete:  # ignored signals of executions not read would mismatch
            return
        candidates = [
            e
            for e in self.timeline
            if (isinstance(e, DecisionEntry) and e.via == "signal") or isinstance(e, SignalEntry)
        ]
        used: set[int] = set()
        for entry in candidates:
            name = entry.decision if isinstance(entry, DecisionEntry) else entry.name
            call_id = entry.tool_call_id if isinstance(entry, DecisionEntry) else None
            match = next(
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
            if match is not None:
                used.add(match)
                entry.accepted, entry.ignored_reason = False, str(recorded[match].get("reason", ""))
            elif isinstance(entry, DecisionEntry) or entry.name in ("interrupt", "pause", "resume"):
                entry.accepted, entry.ignored_reason = True, None


def audit(
    histories: WorkflowHistory | Sequence[WorkflowHistory],
    *,
    data_converter: DataConverter = pydantic_data_converter,
) -> Audit:
    """Build the :class:`Audit` of a run from its history (or its chain of histories, oldest first).

    Model steps and tool calls come from their activities' payloads (``model.complete`` input
    ``CallModelInput`` / result ``ModelReply``; ``tool.invoke`` input ``InvokeToolInput`` / result
    ``ToolOutcome``). Tool calls that never ran (denied, rejected, timed out) are derived from the
    model's reply and the run's pinned policy (the ``spec.resolve`` result), and corrected by the
    run's own records when the history holds them (``RunResult.tool_calls`` of a finished run, the
    state carried across continue-as-new). Approve/reject signals are judged accepted or ignored
    with the workflow's rules (already decided, not waiting, unknown, principal not an approver).
    Updates ``decide`` that the validator refused leave no event in Temporal's history, so they do
    not appear; accepted ones do.

    Raises:
        ValueError: a history does not begin with ``WorkflowExecutionStarted``.
    """
    chain = [histories] if isinstance(histories, WorkflowHistory) else list(histories)
    if not chain:
        raise ValueError("no history to audit")
    first = _started(chain[0])
    for h in chain[1:]:
        _started(h)
    aud = _Auditor(data_converter, chain_complete=not first.continued_execution_run_id)
    for h in chain:
        aud.walk(h)
    req = aud.req
    # Entries were created in event order, but a tool call moves to the event that settled it.
    order = {h.run_id: i for i, h in enumerate(chain)}
    aud.timeline.sort(
        key=lambda e: (order.get(e.run_id, 0), e.event_id, isinstance(e, ToolCallEntry))
    )
    return Audit(
        workflow_id=chain[-1].workflow_id,
        run_ids=[h.run_id for h in chain],
        chain_complete=not first.continued_execution_run_id,
        agent=str(req.get("agent", "")),
        input=str(req.get("input", "")),
        tenant_id=str(req.get("tenant_id", "default")),
        principal_id=str(req.get("principal_id", "anonymous")),
        parent_run_id=req.get("parent_run_id"),
        fork_turn=req.get("fork_turn"),
        status=aud.status,
        result=aud.result,
        events=aud.events,
        timeline=aud.timeline,
    )


# ---------------------------------------------------------------------------------- text


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


def _line(e: Any) -> str:
    if isinstance(e, RunStartedEntry):
        if e.continued_from:
            return f"continued    execution {e.run_id} (from {e.continued_from}) at turn {e.turn}"
        lineage = (
            f"; forked from {e.parent_run_id} at turn {e.fork_turn}"
            f" ({e.seeded_messages} seed messages)"
            if e.parent_run_id
            else ""
        )
        model = f" model={e.model}" if e.model else ""
        return (
            f"run started  agent={e.agent}{model} tenant={e.tenant_id} principal={e.principal_id}"
            f" mode={e.mode} queue={e.task_queue}{lineage}: {_clip(e.input)!r}"
        )
    if isinstance(e, SpecResolvedEntry):
        if e.status != "completed":
            return f"spec         {e.agent}: {e.status}{': ' + e.error if e.error else ''}"
        return (
            f"spec         {e.agent} pinned: model={e.model} hash={e.spec_hash[:12]}"
            f" tools={','.join(e.tools)}"
        )
    if isinstance(e, ModelStepEntry):
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
    if isinstance(e, ApprovalRequestedEntry):
        who = ", ".join(e.approvers) or "anyone"
        return (
            f"approval     {e.tool_call_id} {e.name}({_args_text(e.arguments)}) waits for a person"
            f" (approvers: {who}; {e.reason})"
        )
    if isinstance(e, ToolCallEntry):
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
    if isinstance(e, DecisionEntry):
        verdict = "accepted" if e.accepted else f"IGNORED: {e.ignored_reason}"
        args = f" args={_args_text(e.arguments)}" if e.arguments is not None else ""
        note = f" ({_clip(e.comment, 80)})" if e.comment else ""
        what = f"{e.decision} {e.tool_call_id} by {e.who} via {e.via}"
        return f"decision     {what}{args}{note} -> {verdict}"
    if isinstance(e, SignalEntry):
        if e.accepted is None:
            verdict = "effect unknown"
        else:
            verdict = "accepted" if e.accepted else f"IGNORED: {e.ignored_reason}"
        p = _as_dict(e.payload)
        detail = {k: v for k, v in p.items() if k != "principal_id"}
        return f"signal       {e.name} by {e.who} {_args_text(detail)} -> {verdict}"
    if isinstance(e, ActivityEntry):
        return f"activity     {e.activity_type} [{e.status}, {e.attempts} attempt(s)]" + (
            f" error: {e.error}" if e.error else ""
        )
    if isinstance(e, ContinuedAsNewEntry):
        return f"continue-as-new after turn {e.turn} -> execution {e.new_run_id}"
    if isinstance(e, RunFinishedEntry):
        u = e.usage
        err = f" error: {e.error}" if e.error else ""
        return (
            f"run finished {e.status}: {e.stopped_reason}; {e.turns} turn(s),"
            f" tokens {u.prompt_tokens}+{u.completion_tokens}={u.total_tokens},"
            f" cost ${u.cost_usd:.6f}{err}"
        )
    return f"{getattr(e, 'kind', '?')}"


def render_audit_text(a: Audit) -> str:
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
    lines.append(f"{runs}, {a.events} events")
    lines.append("")
    for e in a.timeline:
        lines.append(f"{e.time}  {_line(e)}")
    lines.append("")
    steps, calls, decisions = a.model_steps, a.tool_calls, a.decisions
    by_status: dict[str, int] = {}
    for c in calls:
        by_status[c.status] = by_status.get(c.status, 0) + 1
    lines.append(
        f"{len(steps)} model step(s), {len(calls)} tool call(s) ("
        + ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
        + f"), {len(decisions)} decision(s), {len(a.ignored)} ignored"
    )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- replay


class ReplayReport(BaseModel):
    """Outcome of replaying recorded histories with the current workflow code.

    ``compatible`` is True when every history replayed without a task failure (above all
    ``NondeterminismError``); ``failure`` is the first failure's text and ``failed_run_id`` its
    execution. ``events`` is the number of events replayed, over ``run_ids`` (oldest first).
    """

    workflow_id: str
    run_ids: list[str]
    compatible: bool
    events: int
    failure: str | None = None
    failure_type: str | None = None
    failed_run_id: str | None = None


def _replayer(workflows: Sequence[type] | None, data_converter: DataConverter) -> Any:
    from temporalio.worker import Replayer

    if workflows is None:
        from workflows.agent_run import AgentRun

        workflows = [AgentRun]
    return Replayer(workflows=list(workflows), data_converter=data_converter)


async def replay_histories(
    histories: Iterable[WorkflowHistory],
    *,
    workflows: Sequence[type] | None = None,
    data_converter: DataConverter = pydantic_data_converter,
) -> ReplayReport:
    """Replay histories (one run's executions, oldest first) and report the first failure.

    Args:
        histories: the histories to replay.
        workflows: workflow classes to replay with (default: ``[AgentRun]``, the current code).
        data_converter: as the workers use.
    """
    chain = list(histories)
    if not chain:
        raise ValueError("no history to replay")
    replayer = _replayer(workflows, data_converter)
    report = ReplayReport(
        workflow_id=chain[-1].workflow_id,
        run_ids=[h.run_id for h in chain],
        compatible=True,
        events=sum(len(h.events) for h in chain),
    )
    for h in chain:
        res = await replayer.replay_workflow(h, raise_on_replay_failure=False)
        if res.replay_failure is not None:
            report.compatible = False
            report.failure = str(res.replay_failure) or repr(res.replay_failure)
            report.failure_type = type(res.replay_failure).__name__
            report.failed_run_id = h.run_id
            break
    return report


async def replay(
    client: Client, run_id: str, *, workflows: Sequence[type] | None = None
) -> ReplayReport:
    """Fetch run ``run_id``'s histories (every execution of the chain) and replay them.

    Works on running and finished runs alike. Uses the client's data converter.

    Raises:
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    chain = await fetch_chain(client, run_id)
    return await replay_histories(chain, workflows=workflows, data_converter=client.data_converter)


def load_history_file(path: str | Path, workflow_id: str | None = None) -> WorkflowHistory:
    """Read a history saved as JSON (``WorkflowHistory.to_json()``, the Web UI's or CLI's export).

    The workflow id is ``workflow_id``, else the start event's, else the file's stem.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a JSON workflow history.
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    try:
        history = WorkflowHistory.from_json(workflow_id or p.stem, text)
    except Exception as e:  # noqa: BLE001 - protobuf/json errors of many kinds
        raise ValueError(f"{p} is not a workflow history in JSON: {e}") from None
    if not history.events:
        raise ValueError(f"{p} holds no history events")
    if workflow_id is None:
        wid = _started(history).workflow_id
        if wid:
            history = WorkflowHistory(wid, history.events)
    return history


async def replay_file(
    path: str | Path,
    *,
    workflow_id: str | None = None,
    workflows: Sequence[type] | None = None,
    data_converter: DataConverter = pydantic_data_converter,
) -> ReplayReport:
    """Replay one stored JSON history (see :func:`load_history_file`) with the current code.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a JSON workflow history.
    """
    history = load_history_file(path, workflow_id)
    return await replay_histories([history], workflows=workflows, data_converter=data_converter)


# ---------------------------------------------------------------------------------- fork


class ForkError(ValueError):
    """The run cannot be forked as asked (no model step, or the turn is out of range)."""


def fork_points(
    histories: WorkflowHistory | Sequence[WorkflowHistory],
    data_converter: DataConverter = pydantic_data_converter,
) -> dict[int, list[dict[str, Any]]]:
    """The messages the model saw at each model step: ``{turn: messages}`` (turns are 1-based).

    Read from the ``CallModelInput`` of each ``model.complete`` ActivityTaskScheduled event;
    payloads must be inline (see :func:`inline_payloads`). Turns whose input cannot be read are
    left out.
    """
    chain = [histories] if isinstance(histories, WorkflowHistory) else list(histories)
    points: dict[int, list[dict[str, Any]]] = {}
    for h in chain:
        for ev in h.events:
            if ev.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                continue
            a = ev.activity_task_scheduled_event_attributes
            if a.activity_type.name != MODEL_COMPLETE:
                continue
            inp = _as_dict(_first(data_converter, a.input))
            turn = inp.get("turn")
            if isinstance(turn, int) and turn not in points:
                points[turn] = list(inp.get("messages") or [])
    return points


def _edit_seed(messages: list[dict[str, Any]], message: str) -> list[dict[str, Any]]:
    seed = copy.deepcopy(messages)
    if seed and seed[-1].get("role") == "user":
        seed[-1]["content"] = message
    else:
        seed.append({"role": "user", "content": message})
    return seed


async def fork(
    client: Client,
    run_id: str,
    turn: int,
    *,
    message: str | None = None,
    model: str | None = None,
    task_queue: str | None = None,
    workflow_id: str | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start a NEW run that takes over run ``run_id`` just before its model step ``turn``.

    The seed is exactly the messages the model saw at step ``turn`` (1-based), read from the
    history (``CallModelInput.messages`` of that step), so nothing from step ``turn`` on is
    replayed: the fork's first model step is the original's step ``turn`` asked again. Steps
    are numbered over the whole continue-as-new chain; the fork numbers its own steps from 1.

    Args:
        client: a connected client.
        run_id: the run to fork (any state: running or finished).
        turn: the model step to fork at, ``1 <= turn <= N`` where N is the run's last model step.
        message: edits the seed: when the seed ends with a user message (always at turn 1, or
            when a person had just sent one) its content is replaced by ``message``; otherwise
            (the seed ends with tool results) ``message`` is appended as a new user message.
        model: another model for the fork (``RunRequest.model``); default: the original's override.
        task_queue: default: the original run's task queue.
        workflow_id: default ``run-<uuid4>``.

    The new ``RunRequest`` copies the original's agent, input, tenant, principal, mode, limits
    and spec file, and sets ``seed_messages``, ``parent_run_id=run_id`` and ``fork_turn=turn``
    (the run upserts its parent search attribute when the namespace has it). The agent
    spec is resolved again when the fork starts (today's tools and policy).

    Returns:
        The new run's handle (its ``id`` is the new run id).

    Raises:
        ForkError: the run has no model step, or ``turn`` is outside ``1..N`` (the message names
            the range).
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    from workers.client import start_run

    chain = await inline_payloads(await fetch_chain(client, run_id), client.data_converter)
    points = fork_points(chain)
    if not points:
        raise ForkError(f"run {run_id} has no model step yet: nothing to fork from")
    last = max(points)
    if turn not in points:
        lo = min(points)
        raise ForkError(
            f"turn {turn} is out of range: run {run_id} has model steps {lo}..{last};"
            f" choose a turn between {lo} and {last}"
        )
    first_req = _as_dict(_first(pydantic_data_converter, _started(chain[0]).input))
    try:
        orig = RunRequest.model_validate({k: v for k, v in first_req.items() if k != "carry"})
    except ValidationError as e:
        raise ForkError(f"run {run_id}'s request cannot be read: {e}") from None
    seed = copy.deepcopy(points[turn])
    if message is not None:
        seed = _edit_seed(seed, message)
    req = orig.model_copy(
        update={
            "seed_messages": seed,
            "parent_run_id": run_id,
            "fork_turn": turn,
            "model": model if model is not None else orig.model,
            "carry": None,
        }
    )
    queue = task_queue or _started(chain[-1]).task_queue.name or None
    return await start_run(client, req, task_queue=queue, workflow_id=workflow_id)


async def lineage(
    client: Client, run_id: str, *, max_depth: int = 20
) -> list[tuple[str, int | None]]:
    """``[(run_id, fork_turn), (parent, its fork_turn), ...]`` up to the first run (not a fork).

    Each step reads the first event of the run's latest execution (its ``RunRequest``).
    ``fork_turn`` is None for the root. Stops at ``max_depth`` or at a run that cannot be read.
    """
    out: list[tuple[str, int | None]] = []
    current: str | None = run_id
    while current and len(out) < max_depth:
        req: dict[str, Any] = {}
        try:
            async for ev in client.get_workflow_handle(current).fetch_history_events(page_size=1):
                attrs = ev.workflow_execution_started_event_attributes
                values = await client.data_converter.decode_wrapper(attrs.input)
                req = _as_dict(values[0] if values else None)
                break
        except Exception:  # noqa: BLE001 - a deleted ancestor ends the walk
            out.append((current, None))
            break
        out.append((current, req.get("fork_turn")))
        current = req.get("parent_run_id")
    return out
