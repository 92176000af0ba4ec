"""The audit of a run: its histories walked event by event into an :class:`Audit`."""

from __future__ import annotations

from collections.abc import Callable

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter

from workers.history import _activities, _lifecycle, _people
from workers.history._actions import billable_actions
from workers.history._entries import Audit, ToolCallEntry
from workers.history._fetch import Histories, as_chain, fetch_chain, start_attributes
from workers.history._payloads import DEFAULT_CONVERTER, inline_payloads
from workers.history._walk import At, Walk

Handler = Callable[[Walk, At], None]

_E = EventType
HANDLERS: dict[int, Handler] = {
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED: _lifecycle.on_run_started,
    _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED: _activities.on_scheduled,
    _E.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED: _activities.on_cancel_requested,
    _E.EVENT_TYPE_ACTIVITY_TASK_STARTED: _activities.on_started,
    _E.EVENT_TYPE_MARKER_RECORDED: _activities.on_marker,
    **{t: _activities.on_closed for t in _activities.CLOSED_EVENTS},
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED: _people.on_signal,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED: _people.on_update_accepted,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_REJECTED: _people.on_update_rejected,
    _E.EVENT_TYPE_TIMER_FIRED: _people.on_timer_fired,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW: _lifecycle.on_continued,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED: _lifecycle.on_completed,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED: _lifecycle.on_failed,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED: _lifecycle.on_terminated,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED: _lifecycle.on_cancelled,
    _E.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT: _lifecycle.on_timed_out,
}
"""What the audit does with each event type it reads (others are counted, nothing more)."""


def _walk(w: Walk, history: WorkflowHistory) -> None:
    w.new_execution(history.events)
    for ev in history.events:
        w.events += 1
        handler = HANDLERS.get(ev.event_type)
        if handler is not None:
            handler(w, At(ev, history.run_id, history.workflow_id))


def audit(histories: Histories, *, data_converter: DataConverter = DEFAULT_CONVERTER) -> Audit:
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

    Payloads are read with ``data_converter``'s payload converter and must be inline (see
    :func:`inline_payloads`).

    Raises:
        ValueError: no history, or a history does not begin with ``WorkflowExecutionStarted``.
    """
    chain = as_chain(histories)
    if not chain:
        raise ValueError("no history to audit")
    complete = not start_attributes(chain[0]).continued_execution_run_id
    for h in chain[1:]:
        start_attributes(h)
    w = Walk(data_converter, chain_complete=complete)
    for h in chain:
        _walk(w, h)
    # Entries were created in event order, but a tool call moves to the event that settled it.
    order = {h.run_id: i for i, h in enumerate(chain)}
    w.timeline.sort(
        key=lambda e: (order.get(e.run_id, 0), e.event_id, isinstance(e, ToolCallEntry))
    )
    return Audit(
        workflow_id=chain[-1].workflow_id,
        run_ids=[h.run_id for h in chain],
        chain_complete=complete,
        agent=w.request_field("agent", ""),
        input=w.request_field("input", ""),
        tenant_id=w.request_field("tenant_id", "default"),
        principal_id=w.request_field("principal_id", "anonymous"),
        parent_run_id=w.req.get("parent_run_id"),
        fork_turn=w.req.get("fork_turn"),
        status=w.status,
        result=w.result,
        events=w.events,
        actions=_actions(chain),
        timeline=w.timeline,
    )


def _actions(chain: list[WorkflowHistory]) -> dict[str, int]:
    """Temporal Cloud actions of every execution read, by kind, summed."""
    out: dict[str, int] = {}
    for h in chain:
        for kind, n in billable_actions(list(h.events)).items():
            out[kind] = out.get(kind, 0) + n
    return out


async def audit_run(client: Client, run_id: str) -> Audit:
    """Fetch every execution of run ``run_id``, resolve its payloads and :func:`audit` it.

    Payloads are resolved and read with the client's data converter (the worker's, when the
    client was connected by :func:`workers.client.connect`).

    Raises:
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    chain = await inline_payloads(await fetch_chain(client, run_id), client.data_converter)
    return audit(chain, data_converter=client.data_converter)
