"""``POST /agui``: the AG-UI protocol (``ag-ui-protocol`` 1.x) over a durable conversation run.

An edge adapter like the console's other handlers (docs/agui.md): the request is an AG-UI
``RunAgentInput``; the answer is AG-UI events as Server-Sent Events (``ag_ui.encoder``), translated
from the run's event stream (docs/contract.md "Event stream", :func:`workers.client.follow`).

**The thread is the run.** ``threadId`` (1-128 of ``A-Za-z0-9_-``) and the person's tenant name
the workflow ``agui.<tenant>.<threadId>`` (:func:`thread_workflow_id`; the tenant with every
character outside ``A-Za-z0-9_`` escaped, so no two tenants share an id), an ``AgentRun`` in
``mode: chat``. The front end's new user message goes by update-with-start
(:func:`workers.conversations.converse`): the first one starts the run, later ones are update
``add_message``, so a stateless front end always reaches the same workflow.

**What is new in the input**: the messages after its last assistant message. A tool message
there answers a tool call this adapter sent: ``approve_tool_call`` (id ``approve-<call id>``) is
the update ``decide`` (content ``{"approved": bool, "arguments"?, "reason"?, "comment"?}``),
any other a client tool's call, the update ``tool_result`` (content as text, ``error`` as
``is_error``). A user message is the next turn. ``RunAgentInput.tools`` become
``RunRequest.client_tools`` when the run starts.

**Events**: ``RUN_STARTED``, ``STATE_SNAPSHOT`` (``run_id``, ``status``, ``turn``, ``usage``,
``pending_approvals``), then per run event: ``text_delta`` -> ``TEXT_MESSAGE_START``/``CONTENT``
(``END`` at the step's end or a ``model_retry``), ``tool_started`` -> ``TOOL_CALL_START``/
``ARGS``/``END``, ``tool_finished`` -> ``TOOL_CALL_RESULT``, ``approval_requested`` -> a call of
``approve_tool_call`` (args ``{tool_call_id, name, arguments}``), ``client_tool_requested`` -> a
call of that tool, ``status``/``model_finished``/approvals -> ``STATE_DELTA`` (JSON Patch). The AG-UI
run ends (``RUN_FINISHED``) when the run waits for the front end (the next message, an approval,
a client tool's result) or stops; a run that ended other than ``completed`` gives ``RUN_ERROR``
(``code`` = its status), as does a refused decision or message.

Authentication, Host and Origin checks are the console's (:mod:`workers.console.auth`): the
principal is the authenticated identity, never a field of the input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web
from pydantic import BaseModel
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from workers import client as rc
from workers import conversations
from workers.console import agui_events as ev
from workers.console import auth as ca
from workers.console.agui_events import APPROVAL_PREFIX, APPROVAL_TOOL, AguiStream, text_of
from workers.console.common import (
    CLIENT_KEY,
    LIVE_SECRET_KEY,
    NO_FRAMING_HEADERS,
    QUEUE_KEY,
    SIGNER_KEY,
    _bad_request,
    _body,
    _who,
)
from workers.http_site import open_sse
from workflows.models import MAX_NAME_CHARS, WORKFLOW_NAME, RunRequest

if TYPE_CHECKING:
    from ag_ui.core import Message, RunAgentInput

__all__ = ["THREAD_ID", "Decision", "thread_workflow_id"]

THREAD_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
"""What a ``threadId`` may be (UUIDs, the ids AG-UI clients make, fit)."""


def thread_workflow_id(tenant: str, thread_id: str) -> str:
    """The workflow id of an AG-UI thread: ``agui.<tenant, escaped>.<thread_id>``.

    Every character of ``tenant`` outside ``A-Za-z0-9_`` is written ``%XX`` (its UTF-8 bytes), so
    the id names one (tenant, thread) pair: no tenant can name another's thread or a child run
    (``<parent id>.<NAME>-<n>``).

    Raises:
        ValueError: ``thread_id`` does not match :data:`THREAD_ID`.
    """
    if not THREAD_ID.fullmatch(thread_id):
        raise ValueError("threadId must be 1-128 characters of A-Za-z0-9_-")
    escaped = "".join(
        c
        if (c.isascii() and (c.isalnum() or c == "_"))
        else "".join(f"%{b:02X}" for b in c.encode())
        for c in tenant
    )
    return f"agui.{escaped}.{thread_id}"


def _new_messages(messages: list[Message]) -> list[Message]:
    """The messages after the last assistant message (what the front end added since)."""
    out: list[Message] = []
    for m in reversed(messages):
        if m.role == "assistant":
            break
        out.append(m)
    return out[::-1]


class Decision(BaseModel):
    """The content of a tool message answering ``approve_tool_call``."""

    approved: bool
    arguments: dict[str, Any] | None = None
    reason: str | None = None
    comment: str | None = None


def _tenant(body: RunAgentInput, ident: ca.Identity) -> str:
    """The tenant of the request: ``forwardedProps.tenant_id``, else the person's only one.

    Raises:
        web.HTTPForbidden: the person does not hold that tenant.
    """
    mine = sorted(t for t in ident.tenants if t != "*")
    forwarded = body.forwarded_props if isinstance(body.forwarded_props, dict) else {}
    asked = forwarded.get("tenant_id")
    tenant = asked if isinstance(asked, str) and asked else (mine[0] if len(mine) == 1 else "")
    tenant = tenant or "default"
    if not ident.may_see(tenant):
        raise web.HTTPForbidden(
            text=json.dumps({"error": f"you may not use tenant {tenant!r}"}),
            content_type="application/json",
        )
    return tenant


async def _agui(request: web.Request) -> web.StreamResponse:
    from ag_ui.core import RunAgentInput, RunStartedEvent

    body: RunAgentInput = await _body(request, RunAgentInput)
    ident = _who(request)
    tenant = _tenant(body, ident)
    try:
        wf_id = thread_workflow_id(tenant, body.thread_id)
    except ValueError as e:
        raise _bad_request(str(e)) from None
    new = _new_messages(list(body.messages))
    users = [m for m in new if m.role == "user" and text_of(m.content).strip()]
    if any(len(m.id) > MAX_NAME_CHARS for m in users):
        raise _bad_request(f"a message id may have at most {MAX_NAME_CHARS} characters")
    existing = await _thread_state(request, wf_id, tenant)
    if existing is None and not users:
        raise _bad_request("a new thread needs a user message")
    act = _Act(request, body, ident, tenant, wf_id, existing)
    act.decisions = [(m, _decision(m)) for m in new if _is_approval(m)]
    act.answers = [m for m in new if m.role == "tool" and not _is_approval(m)]
    act.users = users
    resp = await open_sse(request, NO_FRAMING_HEADERS)
    out = AguiStream(resp, body.thread_id, body.run_id, wf_id)
    await out.send(RunStartedEvent(thread_id=body.thread_id, run_id=body.run_id))
    try:
        await act.run(out)
    except (RPCError, WorkflowUpdateFailedError, ValueError) as e:
        await ev.error(out, e)  # ValueError: pydantic's, a request the run would not take
    except ConnectionResetError:
        pass  # the front end went away; the run goes on
    return resp


def _is_approval(m: Any) -> bool:
    return m.role == "tool" and m.tool_call_id.startswith(APPROVAL_PREFIX)


@dataclass
class _Act:
    """What one request does to the thread's run: decisions, tool results, the next message."""

    request: web.Request
    body: RunAgentInput
    ident: ca.Identity
    tenant: str
    wf_id: str
    existing: Any | None
    decisions: list[tuple[Any, Decision]] = field(default_factory=list[tuple[Any, Decision]])
    answers: list[Any] = field(default_factory=list[Any])
    users: list[Any] = field(default_factory=list[Any])

    async def run(self, out: AguiStream) -> None:
        """Act, then follow the run's events from where the act began (:func:`ev.follow`)."""
        from ag_ui.core import StateSnapshotEvent

        client, wf_id, ident = self.request.app[CLIENT_KEY], self.wf_id, self.ident
        offset = 0
        if self.existing is not None:
            out.state = ev.state_of(wf_id, self.existing)
            await out.send(StateSnapshotEvent(snapshot=out.state))
            offset = await conversations.stream_offset(client, wf_id)
        for m, d in self.decisions:
            await rc.decide(
                client, wf_id, m.tool_call_id.removeprefix(APPROVAL_PREFIX),
                "approve" if d.approved else "reject", ident.principal_id,
                arguments=d.arguments if d.approved else None, reason=d.reason,
                comment=d.comment, signer=self.request.app[SIGNER_KEY], roles=sorted(ident.roles),
            )  # fmt: skip
        for m in self.answers:
            out.answered.add(m.tool_call_id)
            await _tool_result(client, wf_id, m, ident)
        if self.users:
            last = self.users[-1]
            req = _run_request(self.body, text_of(last.content), last.id, ident, self.tenant)
            queue = self.request.app[QUEUE_KEY] or None
            got = await conversations.converse(client, req, wf_id, last.id, task_queue=queue)
            offset = 0 if got.duplicate else got.offset
            if self.existing is None:
                out.state = {"run_id": wf_id, "status": "running", "turn": 0, "usage": {},
                             "pending_approvals": []}  # fmt: skip
                await out.send(StateSnapshotEvent(snapshot=out.state))
        elif self.existing is not None and not self.answers and not self.decisions:
            # nothing new: tell what the run waits for, and end
            await ev.waiting_calls(out, self.existing)
            await ev.finish(out)
            return
        await ev.follow(client, out, offset, self.request.app[LIVE_SECRET_KEY] or None)


def _decision(m: Any) -> Decision:
    """The decision a tool message carries; 400 when its content is not one."""
    try:
        return Decision.model_validate_json(text_of(m.content))
    except ValueError:
        raise _bad_request(
            f"the answer to {m.tool_call_id} must be JSON "
            '{"approved": true|false, "arguments"?: {...}, "reason"?: "..."}'
        ) from None


def _run_request(
    body: RunAgentInput, text: str, message_id: str, ident: ca.Identity, tenant: str
) -> RunRequest:
    """The start request of the thread's run: ``mode: chat``, the front end's tools as client tools."""
    forwarded = body.forwarded_props if isinstance(body.forwarded_props, dict) else {}
    agent = forwarded.get("agent")
    data: dict[str, Any] = {
        "agent": agent if isinstance(agent, str) and agent else "default",
        "input": text,
        "input_id": message_id,
        "mode": "chat",
        "principal_id": ident.principal_id,
        "tenant_id": tenant,
    }
    if body.tools:
        data["client_tools"] = [
            {"name": t.name, "description": t.description, "parameters": t.parameters or {}}
            for t in body.tools
            # a front end that renders approvals registers approve_tool_call as its own action
            # (CopilotKit's human-in-the-loop): it answers the run's calls, the model never calls it
            if t.name != APPROVAL_TOOL
        ]
    return RunRequest.model_validate(data)


async def _thread_state(request: web.Request, wf_id: str, tenant: str) -> Any | None:
    """The thread's run state, or None when it has no open run (a new thread, or one ended)."""
    client = request.app[CLIENT_KEY]
    try:
        desc = await rc.handle(client, wf_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    sa_tenant = ((desc.search_attributes or {}).get("TenantId") or [tenant])[0]
    if desc.workflow_type != WORKFLOW_NAME or sa_tenant != tenant:
        raise web.HTTPNotFound(
            text=json.dumps({"error": "no such thread"}), content_type="application/json"
        )
    if desc.status is None or desc.status.name != "RUNNING":
        return None
    return await rc.state(client, wf_id)


async def _tool_result(client: Any, wf_id: str, m: Any, ident: ca.Identity) -> None:
    """A client tool's result: update ``tool_result`` (:func:`workers.client.tool_result`)."""
    await rc.tool_result(
        client,
        wf_id,
        {
            "tool_call_id": m.tool_call_id,
            "content": text_of(m.content),
            "is_error": bool(getattr(m, "error", None)),
            "principal_id": ident.principal_id,
            "roles": sorted(ident.roles),
        },
    )
