"""What the console shows of a run: its row in the list and its page, with or without a worker.

A run's page (``GET /runs/{run_id}``, :func:`run_page`) asks the run's ``state`` query while the run
is open and a worker answers it within :data:`QUERY_TIMEOUT`. A closed run is read from its
history instead (its result, or the close event's failure or reason, and its start event's
request), decoded with the client's data converter (payload codec included): no worker is
needed, so the people in charge still see runs during a worker outage. An open run whose query
is not answered in time gets the same history-derived page with :data:`NO_WORKER_NOTE`.

Every page carries ``controls``: the actions the run's status allows (:func:`controls`), which
the page shows and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHistoryEventFilterType,
    WorkflowQueryFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from workers import client as rc
from workflows.models import LiveStatus, RunRequest, RunResult, RunState, RunStatus

__all__ = [
    "CLOSED_STATUSES",
    "LIVE_STATUSES",
    "NO_WORKER_NOTE",
    "QUERY_TIMEOUT",
    "RUN_STATUSES",
    "controls",
    "list_row",
    "run_page",
    "shown_status",
    "status_filter",
]

QUERY_TIMEOUT = timedelta(seconds=3)
"""Longest wait for the ``state`` query of an open run before its page is read from history."""

NO_WORKER_NOTE = (
    "no worker answering: the run's live state cannot be read, so this page shows what its "
    "history and the listing say; it updates when a worker is back"
)
"""The note on an open run's page when no worker answered its ``state`` query in time."""

LIVE_STATUSES: tuple[str, ...] = LiveStatus.__args__
"""``AgentStatus`` values of a run in progress."""
RUN_STATUSES: tuple[str, ...] = RunStatus.__args__
"""``AgentStatus`` values of a finished run (``RunResult.status``)."""
CLOSED_STATUSES: dict[str, str] = {
    "terminated": "Terminated",
    "timed_out": "TimedOut",
    "canceled": "Canceled",
}
"""Statuses a run gets from Temporal alone (no ``RunResult``): shown name to ``ExecutionStatus``."""


def _sa(attrs: Mapping[str, Sequence[Any]] | None, key: str) -> Any:
    values = (attrs or {}).get(key) or [None]
    return values[0]


def _wf_status(status: WorkflowExecutionStatus | None) -> str:
    return status.name.lower() if status else "unknown"


def shown_status(workflow_status: str, agent_status: str | None) -> str:
    """The status a person sees: the run's own (``AgentStatus``) unless Temporal closed it.

    ``workflow_status`` is Temporal's (``running``, ``completed``, ``failed``, ``terminated``,
    ``timed_out``, ``canceled``), ``agent_status`` the search attribute (None when unset). A run
    closed by Temporal (terminated, timed out, canceled, failed outright) shows that, never a
    live status its search attribute still holds.
    """
    if workflow_status == "running":
        return agent_status or "running"
    if workflow_status == "completed" and agent_status in RUN_STATUSES:
        return agent_status
    return workflow_status


def status_filter(status: str) -> str:
    """The visibility clause (`` AND ...``) for the list's status filter.

    Raises:
        ValueError: ``status`` is none of :data:`LIVE_STATUSES`, :data:`RUN_STATUSES`,
            :data:`CLOSED_STATUSES`.
    """
    if status in LIVE_STATUSES:
        return f" AND AgentStatus = '{status}' AND ExecutionStatus = 'Running'"
    if status in RUN_STATUSES:
        return f" AND AgentStatus = '{status}' AND ExecutionStatus != 'Running'"
    if status in CLOSED_STATUSES:
        return f" AND ExecutionStatus = '{CLOSED_STATUSES[status]}'"
    known = (*LIVE_STATUSES, *RUN_STATUSES, *CLOSED_STATUSES)
    raise ValueError(f"status must be one of {', '.join(known)}")


def controls(*, closed: bool, status: str, paused: bool, pending: int, worker: bool) -> list[str]:
    """The actions a run's page offers, in the order shown.

    A closed run offers none. An open one: ``interrupt`` and ``message`` (signals, which the
    server keeps until a worker takes them), ``resume`` when paused else ``pause``, and
    ``decide`` (approve / reject, and a client tool's result) only while approvals or client
    tools are pending and a worker answers (a decision or a result is an update, which needs
    one).
    """
    if closed:
        return []
    out = ["interrupt", "message", "resume" if paused or status == "paused" else "pause"]
    if pending and worker:
        out.append("decide")
    return out


def _waiting_calls(page: Mapping[str, Any]) -> int:
    """Calls the page's run waits on a person for: approvals and client tools' results."""
    return len(page.get("pending_approvals") or []) + len(page.get("pending_client_tools") or [])


def _memo_input(memo: Mapping[str, Any]) -> str | None:
    req = memo.get(rc.MEMO_REQUEST)
    if isinstance(req, dict):
        text = req.get("input")
        return text if isinstance(text, str) else None
    return None


async def list_row(wf: WorkflowExecution, web_ui: str) -> dict[str, Any]:
    """One row of ``GET /api/runs``: what the run was asked, by whom, when, its status and cost.

    Read from the listing alone (search attributes and memo, no call per run). ``request`` is
    the memo's start of the request (None for a run started without it: by a workflow, or by an
    older client). ``cost_usd`` in US dollars, ``started_at`` / ``closed_at`` ISO-8601 UTC.
    """
    sa = wf.search_attributes
    try:
        request = _memo_input(await wf.memo())
    except Exception:  # noqa: BLE001 - a memo this console cannot decode (another key) shows nothing
        request = None
    agent_status = _sa(sa, "AgentStatus")
    wf_status = _wf_status(wf.status)
    return {
        "run_id": wf.id,
        "request": request,
        "agent": _sa(sa, "AgentName"),
        "principal_id": _sa(sa, "PrincipalId"),
        "tenant_id": _sa(sa, "TenantId"),
        "status": shown_status(wf_status, agent_status),
        "workflow_status": wf_status,
        "agent_status": agent_status,
        "cost_usd": _sa(sa, "CostUsd"),
        "total_tokens": _sa(sa, "TotalTokens"),
        "started_at": wf.start_time.isoformat() if wf.start_time else None,
        "closed_at": wf.close_time.isoformat() if wf.close_time else None,
        "parent_id": wf.parent_id,
        "web_ui": web_ui,
    }


async def _first_event(client: Client, run_id: str, execution: str) -> HistoryEvent | None:
    h = client.get_workflow_handle(run_id, run_id=execution)
    async for ev in h.fetch_history_events(page_size=1):
        return ev
    return None


async def _close_event(client: Client, run_id: str, execution: str) -> HistoryEvent | None:
    h = client.get_workflow_handle(run_id, run_id=execution)
    last = None
    async for ev in h.fetch_history_events(
        event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT
    ):
        last = ev
    return last


async def _request(client: Client, run_id: str, execution: str) -> RunRequest | None:
    """The run's request: the start event's input of this execution (None: unreadable)."""
    ev = await _first_event(client, run_id, execution)
    if ev is None or not ev.HasField("workflow_execution_started_event_attributes"):
        return None
    payloads = ev.workflow_execution_started_event_attributes.input.payloads
    if not payloads:
        return None
    try:
        [req] = await client.data_converter.decode([payloads[0]], [RunRequest])
    except Exception:  # noqa: BLE001 - a bad input fails the run itself; here it shows nothing
        return None
    return req if isinstance(req, RunRequest) else None


async def _closing(client: Client, run_id: str, execution: str) -> dict[str, Any]:
    """What the close event says: ``result`` (a RunResult's JSON) or ``error``, and ``closed_at``."""
    ev = await _close_event(client, run_id, execution)
    if ev is None:
        return {}
    out: dict[str, Any] = {"closed_at": ev.event_time.ToDatetime().isoformat() + "Z"}
    if ev.HasField("workflow_execution_completed_event_attributes"):
        payloads = ev.workflow_execution_completed_event_attributes.result.payloads
        if payloads:
            try:
                [res] = await client.data_converter.decode([payloads[0]], [RunResult])
            except Exception as e:  # noqa: BLE001 - e.g. a key this console lacks: say so
                out["error"] = f"the run's result could not be decoded here: {e}"
            else:
                out["result"] = res.model_dump(mode="json")
    elif ev.HasField("workflow_execution_failed_event_attributes"):
        failure = ev.workflow_execution_failed_event_attributes.failure
        out["error"] = str(await client.data_converter.decode_failure(failure))
    elif ev.HasField("workflow_execution_terminated_event_attributes"):
        reason = ev.workflow_execution_terminated_event_attributes.reason
        out["error"] = reason or "terminated without a reason"
    elif ev.HasField("workflow_execution_timed_out_event_attributes"):
        out["error"] = "the run's workflow timed out (its execution timeout)"
    elif ev.HasField("workflow_execution_canceled_event_attributes"):
        out["error"] = "the run's workflow was canceled"
    return out


async def _from_history(
    client: Client, run_id: str, desc: WorkflowExecutionDescription, closed: bool
) -> dict[str, Any]:
    sa = desc.search_attributes
    wf_status = _wf_status(desc.status)
    agent_status = _sa(sa, "AgentStatus")
    req = await _request(client, run_id, desc.run_id)
    page: dict[str, Any] = {
        "status": shown_status(wf_status, agent_status),
        "agent": _sa(sa, "AgentName") or (req.agent if req else ""),
        "principal_id": _sa(sa, "PrincipalId") or (req.principal_id if req else None),
        "tenant_id": _sa(sa, "TenantId") or (req.tenant_id if req else None),
        "input": req.input if req else None,
        "mode": req.mode if req else None,
        "usage": {
            "total_tokens": _sa(sa, "TotalTokens") or 0,
            "cost_usd": _sa(sa, "CostUsd") or 0.0,
        },
        "pending_approvals": [],
        "tool_calls": [],
        "decisions": [],
        "children": [],
        "output": None,
        "paused": agent_status == "paused" and not closed,
        "history_length": desc.history_length,
    }
    if closed:
        closing = await _closing(client, run_id, desc.run_id)
        result = closing.pop("result", None)
        if result is not None:
            page.update({k: v for k, v in result.items() if k != "status"})
            page["status"] = shown_status(wf_status, result["status"])
        page.update(closing)
    else:
        page["pending_activities"] = [
            {"activity": a.activity_type.name, "attempt": a.attempt}
            for a in desc.raw_description.pending_activities
        ]
    return page


async def run_page(
    client: Client, run_id: str, desc: WorkflowExecutionDescription
) -> dict[str, Any]:
    """``GET /runs/{run_id}``: the run's page, as JSON.

    An open run answering its ``state`` query: the :class:`~workflows.models.RunState` fields
    plus ``input`` (from the memo). Otherwise read from history: ``status``, ``agent``,
    ``principal_id``, ``tenant_id``, ``input``, ``usage`` and, for a closed run, its
    ``RunResult`` fields (``output``, ``tool_calls``, ``decisions``, ``children``,
    ``stopped_reason``, ``error``...) or the close event's ``error``. Always: ``source``
    (``"query"`` or ``"history"``), ``closed``, ``workflow_status``, ``worker_answering``
    (None for a closed run: not asked), ``note`` (:data:`NO_WORKER_NOTE`, the query's failure, or
    None), ``controls``
    (:func:`controls`), ``started_at``.

    Raises:
        temporalio.service.RPCError: the server failed (other than the query's deadline).
    """
    wf_status = _wf_status(desc.status)
    closed = desc.status != WorkflowExecutionStatus.RUNNING
    worker: bool | None = None
    note: str | None = None
    page: dict[str, Any] | None = None
    if not closed:
        try:
            st = await rc.handle(client, run_id).query(
                rc.QUERY_STATE, result_type=RunState, rpc_timeout=QUERY_TIMEOUT
            )
        except RPCError as e:
            if e.status not in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):
                raise
            worker, note = False, NO_WORKER_NOTE
        except WorkflowQueryFailedError as e:  # a worker answered with an error
            worker, note = True, f"the run's state query failed ({e}); this page shows its history"
        else:
            worker = True
            page = {**st.model_dump(mode="json"), "input": _memo_input(await desc.memo())}
    if page is None:
        page = await _from_history(client, run_id, desc, closed)
    page.update(
        {
            "source": "history" if note or closed else "query",
            "closed": closed,
            "workflow_status": wf_status,
            "worker_answering": worker,
            "note": note,
            "started_at": desc.start_time.isoformat() if desc.start_time else None,
            "controls": controls(
                closed=closed,
                status=str(page.get("status")),
                paused=bool(page.get("paused")),
                pending=_waiting_calls(page),
                worker=bool(worker),
            ),
        }
    )
    if page.get("input") is None and page["source"] == "query":
        req = await _request(client, run_id, desc.run_id)
        page["input"] = req.input if req else None
    return page
