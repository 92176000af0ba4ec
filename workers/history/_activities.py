"""Audit of activities: model steps, tool calls, the spec's resolution and any other activity."""

from __future__ import annotations

from typing import Any, cast

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType

from activities.contracts import (
    GUARDRAIL_CHECK,
    MODEL_COMPLETE,
    SPEC_RESOLVE,
    TOOL_INVOKE,
    ToolCallRequest,
)
from activities.judge import POLICY_JUDGE
from activities.spec import PinnedSpec
from workers.history._entries import (
    ActivityEntry,
    ApprovalRequestedEntry,
    AskedToolCall,
    DecisionEntry,
    GuardrailEntry,
    ModelStepEntry,
    SpecResolvedEntry,
    ToolCallEntry,
)
from workers.history._payloads import as_dict, first_object
from workers.history._rules import failure_text, status_after_policy, tool_failure_status
from workers.history._walk import At, Walk, iso, ms_between
from workflows.policy import CedarFacts, decide, parse_arguments, re2_search, re_search
from workflows.turn import unique_call_ids
from workflows.versions import PATCH_POLICY_RE2, PATCH_UNIQUE_CALL_IDS

_CLOSED_STATUS = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "completed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "failed",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "timed_out",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "cancelled",
}
CLOSED_EVENTS = tuple(_CLOSED_STATUS)
"""The event types that close an activity."""


def _args_or_raw(arguments: Any) -> Any:
    """The model's arguments parsed into a dict, or as written when they are not a JSON object."""
    parsed = parse_arguments(arguments) if isinstance(arguments, str | dict) else None
    return parsed if parsed is not None else arguments


def _tool_scheduled(w: Walk, at: At, inp: dict[str, Any]) -> ToolCallEntry:
    call_id = str(inp.get("call_id", ""))
    entry = w.tools.get(call_id)
    if entry is None:  # a call the model step did not announce (should not happen)
        entry = ToolCallEntry(
            **at.mark,
            turn=int(inp.get("turn", 0)),
            tool_call_id=call_id,
            name=str(inp.get("name", "")),
        )
        w.tools[call_id] = entry
        w.timeline.append(entry)
    entry.time, entry.event_id, entry.run_id = at.mark["time"], at.ev.event_id, at.run_id
    entry.arguments = _args_or_raw(inp.get("arguments", {}))
    entry.status, entry.ran = "running", True
    return entry


def on_scheduled(w: Walk, at: At) -> None:
    """``ActivityTaskScheduled``: a model step, a tool call starting, the spec, or another."""
    a = at.ev.activity_task_scheduled_event_attributes
    kind = a.activity_type.name
    inp = first_object(w.conv, a.input)
    entry: Any
    if kind == TOOL_INVOKE:
        entry = _tool_scheduled(w, at, inp)
    else:
        if kind == MODEL_COMPLETE:
            for first in inp.get("tools_first") or []:  # calls riding the step (ToolsFirst)
                call = as_dict(first).get("call")
                if isinstance(call, dict):
                    _tool_scheduled(w, at, cast("dict[str, Any]", call))
            entry = ModelStepEntry(
                **at.mark,
                turn=int(inp.get("turn", 0)),
                model=str(inp.get("model", "")),
                messages=len(inp.get("messages") or []),
            )
        elif kind == SPEC_RESOLVE:
            entry = SpecResolvedEntry(
                **at.mark, status="scheduled", agent=str(inp.get("agent", ""))
            )
        else:
            entry = ActivityEntry(**at.mark, activity_type=kind)
        w.timeline.append(entry)
    w.scheduled[at.ev.event_id] = (at.ev, entry)


def on_cancel_requested(w: Walk, at: At) -> None:
    """``ActivityTaskCancelRequested``: a scheduled model step or activity is being cancelled."""
    found = w.scheduled.get(
        at.ev.activity_task_cancel_requested_event_attributes.scheduled_event_id
    )
    if found is not None and isinstance(found[1], ModelStepEntry | ActivityEntry):
        if found[1].status == "scheduled":
            found[1].status = "cancel_requested"


def on_started(w: Walk, at: At) -> None:
    """``ActivityTaskStarted``: remembers the attempt (written when the attempt closes)."""
    a = at.ev.activity_task_started_event_attributes
    w.started_attempts[a.scheduled_event_id] = a.attempt


def on_closed(w: Walk, at: At) -> None:
    """An activity closed (completed, failed, timed out or cancelled): fill in its entry."""
    attrs: Any = getattr(at.ev, at.ev.WhichOneof("attributes") or "")
    found = w.scheduled.get(attrs.scheduled_event_id)
    if found is None:
        return
    sched, entry = found
    status = _CLOSED_STATUS[at.ev.event_type]
    failure = attrs.failure if status in ("failed", "timed_out") else None
    error = failure_text(failure) if failure is not None else None
    result = first_object(w.conv, attrs.result) if status == "completed" else {}
    attempts = w.started_attempts.get(attrs.scheduled_event_id, 0)
    latency = ms_between(sched, at.ev)
    if result:
        for raw in result.get("tool_outcomes") or []:  # held calls' results, checked
            _guardrails(w, at, as_dict(raw))
        _guardrails(w, at, result)
    if isinstance(entry, ModelStepEntry):
        entry.status = status  # pyright: ignore[reportAttributeAccessIssue] - model steps take the tool statuses' subset only
        entry.attempts, entry.latency_ms, entry.error = attempts, latency, error
        entry.completed_at = iso(at.ev)
        if result:
            _model_reply(w, entry, result, at)
    elif isinstance(entry, ToolCallEntry):
        entry.attempts, entry.latency_ms = attempts, latency
        _tool_closed(entry, status, result, failure, error)
    elif isinstance(entry, SpecResolvedEntry):
        entry.status, entry.error = status, error
        if result:
            _spec_resolved(w, entry, result)
    elif isinstance(entry, ActivityEntry):
        entry.status, entry.attempts, entry.latency_ms = status, attempts, latency
        entry.error = error
        if entry.activity_type == POLICY_JUDGE and result:
            _judged(w, first_object(w.conv, sched.activity_task_scheduled_event_attributes.input),
                    result, at)  # fmt: skip


def _judged(w: Walk, inp: dict[str, Any], result: dict[str, Any], at: At) -> None:
    """The judge's verdict (``policy.judge``): approve or reject is a decision of ``judge:<model>``.

    ``escalate`` decides nothing: the call goes on waiting for a person.
    """
    from workers.history._people import settle  # the module of decisions; it imports this one

    call_id, verdict = str(inp.get("tool_call_id", "")), str(result.get("verdict", ""))
    if verdict not in ("approve", "reject") or call_id in w.verdicts:
        return
    who = f"judge:{inp.get('model', '')}"
    w.timeline.append(
        DecisionEntry(
            **at.mark,
            via="judge",
            decision=verdict,
            tool_call_id=call_id,
            who=who,
            comment=str(result.get("reason", "")),
            accepted=True,
        )
    )
    settle(w, call_id, verdict, who, None, at)


def _guardrails(w: Walk, at: At, result: dict[str, Any]) -> None:
    """The ``guardrails`` an activity's result records (trips), onto the timeline."""
    for raw in result.get("guardrails") or []:
        trip = as_dict(raw)
        if not trip.get("guardrail"):
            continue
        w.timeline.append(
            GuardrailEntry(
                **at.mark,
                turn=int(trip.get("turn") or 0),
                stage=str(trip.get("stage", "")),
                guardrail=str(trip["guardrail"]),
                action=str(trip.get("action", "")),
                detail=str(trip.get("detail", "")),
                tool_call_id=trip.get("tool_call_id"),
            )
        )


def _tool_closed(
    entry: ToolCallEntry, status: str, result: dict[str, Any], failure: Any, error: str | None
) -> None:
    if result:
        entry.status = str(result.get("status", "ok"))
        entry.result_chars = int(result.get("output_chars") or 0)
        entry.truncated = bool(result.get("truncated"))
        entry.duration_ms = result.get("duration_ms")
        content = result.get("content")
        entry.result = content if isinstance(content, str) else None
        if isinstance(result.get("arguments"), dict):
            entry.arguments = result["arguments"]
    elif status == "cancelled":
        entry.status = "cancelled"
    else:
        entry.error = error or status
        entry.status = tool_failure_status(status == "timed_out", failure)


def _spec_resolved(w: Walk, entry: SpecResolvedEntry, result: dict[str, Any]) -> None:
    try:
        w.pinned = PinnedSpec.model_validate(result)
    except ValidationError as e:
        entry.error = f"unreadable pinned spec: {e.error_count()} error(s)"
    if w.pinned is not None:
        entry.model = w.req.get("model") or w.pinned.spec.model
        entry.spec_hash = w.pinned.spec_hash
        entry.tools = [t.name for t in w.pinned.tools]
        entry.agent = w.pinned.spec.name


def _model_reply(w: Walk, entry: ModelStepEntry, reply: dict[str, Any], at: At) -> None:
    """A model step's ``ModelReply``: usage, text, and the tool calls it asked for."""
    usage = as_dict(reply.get("usage"))
    entry.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    entry.completion_tokens = int(usage.get("completion_tokens") or 0)
    entry.total_tokens = int(usage.get("total_tokens") or 0)
    entry.cost_usd = float(usage.get("cost_usd") or 0.0)
    entry.http_latency_ms = reply.get("latency_ms")
    for raw in reply.get("tool_outcomes") or []:  # the calls that rode this step
        _tool_ran_in_step(w, as_dict(raw))
    entry.finish_reason = reply.get("finish_reason")
    entry.content = reply.get("content")
    entry.tool_calls = _as_the_run_saw_them(
        w,
        [
            AskedToolCall.model_validate(c)
            for c in reply.get("tool_calls") or []
            if isinstance(c, dict)
        ],
    )
    for call in entry.tool_calls:
        _announce_call(w, entry.turn, call, at)


def _as_the_run_saw_them(w: Walk, calls: list[AskedToolCall]) -> list[AskedToolCall]:
    """The reply's calls with ids the run made unique, if it took patch ``unique-call-ids``."""
    if not calls or not w.took(PATCH_UNIQUE_CALL_IDS):
        return calls
    requests = [ToolCallRequest(id=c.id, name=c.name, arguments=c.arguments) for c in calls]
    return [AskedToolCall(**r.model_dump()) for r in unique_call_ids(requests, w.tools.keys())]


def _tool_ran_in_step(w: Walk, outcome: dict[str, Any]) -> None:
    """A call of ``tools_first``, closed by its model step's ``ModelReply.tool_outcomes``."""
    tool = w.tools.get(str(outcome.get("call_id", "")))
    if tool is None:
        return
    tool.attempts = max(tool.attempts, 1)
    if outcome.get("failure"):
        tool.error = str(outcome["failure"])
        tool.status = "timed_out" if outcome.get("timed_out") else "error"
    else:
        _tool_closed(tool, "completed", outcome, None, None)


def _announce_call(w: Walk, turn: int, call: AskedToolCall, at: At) -> None:
    """A tool call the model asked for, settled by the pinned policy as the workflow does.

    Cedar policies read the run's usage when the call was asked for, which the history does not
    hold here: they are given 0 (the run's own records correct the entry when the history holds
    them, ``RunResult.tool_calls``).
    """
    roles = w.req.get("roles")
    facts = CedarFacts(
        tenant_id=w.request_field("tenant_id", "default"),
        principal_id=w.request_field("principal_id", "anonymous"),
        roles=[str(r) for r in cast("list[Any]", roles)] if isinstance(roles, list) else [],
        agent=w.pinned.spec.name if w.pinned else "",
        turn=turn,
        now=iso(at.ev),
    )
    decision = decide(
        w.policy(),
        w.tool_info(call.name),
        call.id,
        call.name,
        call.arguments,
        facts,
        search=re2_search if w.took(PATCH_POLICY_RE2) else re_search,
    )
    status, args = status_after_policy(call, decision, turn)
    rec = ToolCallEntry(
        **at.mark,
        turn=turn,
        tool_call_id=call.id,
        name=call.name,
        arguments=args,
        requested_arguments=args,
        policy=decision.action,
        policy_reason=decision.reason,
        policy_id=decision.policy_id,
        status=status,
    )
    w.tools[call.id] = rec
    w.timeline.append(rec)
    if decision.action == "approve":
        w.waiting[call.id] = list(decision.approvers)
        w.timeline.append(
            ApprovalRequestedEntry(
                **at.mark,
                turn=turn,
                tool_call_id=call.id,
                name=call.name,
                arguments=rec.arguments,
                approvers=list(decision.approvers),
                reason=decision.reason,
            )
        )


LOCAL_ACTIVITY_MARKER = "core_local_activity"
"""``MarkerRecorded`` name of a local activity (temporalio core): ``details["data"]`` holds its
type and attempt, ``details["result"]`` its result, ``failure`` its failure."""


def on_marker(w: Walk, at: At) -> None:
    """``MarkerRecorded``: a local activity is one marker with its result.

    Revision 4 runs ``spec.resolve`` and local tools so (docs/throughput.md); patch markers are
    skipped.
    """
    a = at.ev.marker_recorded_event_attributes
    if a.marker_name != LOCAL_ACTIVITY_MARKER or "data" not in a.details:
        return
    meta = first_object(w.conv, a.details["data"])
    kind = str(meta.get("activity_type", ""))
    failed = a.HasField("failure")
    error = failure_text(a.failure) if failed else None
    result = first_object(w.conv, a.details["result"]) if "result" in a.details else {}
    status = "failed" if failed else "completed"
    if result:
        _guardrails(w, at, result)
    if kind == GUARDRAIL_CHECK:
        return
    if kind == SPEC_RESOLVE:
        entry = SpecResolvedEntry(**at.mark, status=status, agent=str(w.req.get("agent", "")))
        entry.error = error
        w.timeline.append(entry)
        if result:
            _spec_resolved(w, entry, result)
    elif kind == TOOL_INVOKE and result.get("call_id"):
        tool = w.tools.get(str(result["call_id"])) or _tool_scheduled(w, at, result)
        tool.ran = True  # it keeps its place: where the model asked for it
        if isinstance(result.get("arguments"), dict):
            tool.arguments = result["arguments"]
        tool.attempts, tool.latency_ms = int(meta.get("attempt") or 1), _la_latency_ms(meta)
        _tool_closed(tool, status, result, None, error)
    else:  # a failed local tool call names no call id; shown as the activity it was
        act = ActivityEntry(**at.mark, activity_type=kind or "local activity", status=status)
        act.attempts, act.error = int(meta.get("attempt") or 1), error
        w.timeline.append(act)


def _la_latency_ms(meta: dict[str, Any]) -> float | None:
    """Milliseconds from a local activity's first schedule to its completion (marker data)."""
    try:
        start, end = meta["original_schedule_time"], meta["complete_time"]
        secs = (end["seconds"] - start["seconds"]) + (end["nanos"] - start["nanos"]) / 1e9
    except (KeyError, TypeError):
        return None
    return round(max(secs, 0.0) * 1000, 2)
