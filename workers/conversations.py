"""A conversation run reached by update-with-start: the next user message, wherever the run is.

The AG-UI edge (``workers/console/agui.py``, docs/agui.md) calls :func:`converse` for each message a
front end sends: it starts the thread's run or adds the message to the run already there, in one
request. :func:`stream_offset` is where the run's next event will be, for a subscriber that acts on
the run (a decision, a tool result) and then follows what that act caused.
"""

from __future__ import annotations

from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import (
    Priority,
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
)
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from activities.contracts import fairness_key
from workers.client import UPDATE_ADD_MESSAGE, search_attributes_registered
from workers.config import load_settings
from workers.run_memo import MEMO_REQUEST, request_memo
from workflows.models import (
    WORKFLOW_NAME,
    AddMessageResult,
    AddMessageUpdate,
    RunRequest,
    RunResult,
)

__all__ = ["converse", "start_options", "stream_offset"]


async def start_options(
    client: Client, req: RunRequest
) -> tuple[TypedSearchAttributes | None, dict[str, Any]]:
    """What :func:`workers.client.start_run` and :func:`converse` start a run with.

    Returns the search attributes (None when the namespace lacks them) and the start options
    (fairness priority, the Web UI's summary and details, the memo ``MEMO_REQUEST``).
    """
    from workflows.render import static_details, static_summary
    from workflows.state import SA_AGENT, SA_PRINCIPAL, SA_STATUS, SA_TENANT

    who = [(SA_AGENT, req.agent), (SA_TENANT, req.tenant_id), (SA_PRINCIPAL, req.principal_id)]
    sa = None  # the namespace lacks them: set none
    if await search_attributes_registered(client):
        pairs = [SearchAttributePair(k, v) for k, v in [*who, (SA_STATUS, "running")]]
        sa = TypedSearchAttributes(pairs)
    opts: dict[str, Any] = {
        # the run's workflow tasks are dispatched fairly between tenants (README "Fairness")
        "priority": Priority(fairness_key=fairness_key(req.tenant_id) or None),
        "static_summary": static_summary(req),
        "static_details": static_details(req),
        # the start of the request, for listings (a start-time field: no command, no event)
        "memo": {MEMO_REQUEST: request_memo(req)},
    }
    return sa, opts


async def converse(
    client: Client,
    req: RunRequest,
    workflow_id: str,
    message_id: str,
    *,
    task_queue: str | None = None,
) -> AddMessageResult:
    """A user message to the conversation run ``workflow_id``, starting the run if there is none.

    One update-with-start (Temporal's ``execute_update_with_start_workflow``, conflict policy
    use-existing): when no run of that id is open, ``req`` starts one (``req.input`` is the message,
    ``req.input_id`` its ``message_id``; the update then adds nothing); otherwise the update
    ``add_message`` (``req.input`` as content, ``req.principal_id`` as sender, ``req.client_tools``
    offered from this message on) adds it to the open run. Either way the answer comes once the run holds the message. The update's id is
    ``msg-<message_id>``: a retry of the same message is answered, not added again.

    Raises:
        temporalio.client.WorkflowUpdateFailedError: the run refused the message (it has ended,
            or the payload is invalid: ``MessageRefused``).
        temporalio.client.WithStartWorkflowOperation errors as the SDK raises them (e.g.
            ``RPCError`` when the server is unreachable).
    """
    sa, opts = await start_options(client, req)
    start = WithStartWorkflowOperation(
        WORKFLOW_NAME,
        req,
        id=workflow_id,
        task_queue=task_queue or load_settings().task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        result_type=RunResult,
        search_attributes=sa,
        **opts,
    )
    upd = AddMessageUpdate(
        content=req.input,
        principal_id=req.principal_id,
        message_id=message_id,
        client_tools=req.client_tools,
    )
    return await client.execute_update_with_start_workflow(
        UPDATE_ADD_MESSAGE,
        upd,
        start_workflow_operation=start,
        id=f"msg-{message_id}",
        result_type=AddMessageResult,
    )


async def stream_offset(client: Client, run_id: str) -> int:
    """The offset the run's next event will get (a query; a worker must be up)."""
    return await WorkflowStreamClient.create(client, run_id).get_offset()
