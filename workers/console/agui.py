"""``POST /agui``: the AG-UI protocol (``ag-ui-protocol`` 1.x) over a durable conversation run.

An edge adapter like the console's other handlers (docs/agui.md): the request is an AG-UI
``RunAgentInput``; the answer is AG-UI events as Server-Sent Events (``ag_ui.encoder``), translated
from the run's event stream (docs/contract.md "Event stream", :func:`workers.client.follow`).

**The thread is the run.** ``threadId`` (1-128 of ``A-Za-z0-9_-``) and the person's tenant name
the workflow ``agui.<tenant>.<threadId>`` (:func:`thread_workflow_id`; the tenant with every
character outside ``A-Za-z0-9_`` escaped, so no two tenants share an id), an ``AgentRun`` in
``mode: chat``. The front end's new user message goes by update-with-start
(:func:`workers.client.converse`): the first one starts the run, later ones are update
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

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from aiohttp import web
from pydantic import BaseModel
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from workers import client as rc
from workers.console import auth as ca
from workers.console.common import (
    CLIENT_KEY,
    NO_FRAMING_HEADERS,
    QUEUE_KEY,
    SIGNER_KEY,
    _bad_request,
    _body,
    _who,
)
from workflows.models import WORKFLOW_NAME, RunRequest

if TYPE_CHECKING:
    from ag_ui.core import BaseEvent, Message, RunAgentInput

__all__ = [
    "APPROVAL_TOOL",
    "APPROVAL_PREFIX",
    "IDLE_CHECK_SECONDS",
    "THREAD_ID",
    "thread_workflow_id",
]

APPROVAL_TOOL = "approve_tool_call"
"""Name of the tool call through which the front end answers an approval."""
APPROVAL_PREFIX = "approve-"
"""``toolCallId`` of an approval's tool call: this prefix, then the run's tool call id."""
THREAD_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
"""What a ``threadId`` may be (UUIDs, the ids AG-UI clients make, fit)."""
IDLE_CHECK_SECONDS = 2.0
"""With no event for this long, the adapter asks the run's state (a query) whether it waits for
the front end, and sends a keep-alive comment."""
WAITING = frozenset({"waiting_for_message", "awaiting_approval", "paused", "budget_paused"})
"""Statuses in which the run waits for someone: the AG-UI run ends there."""


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


def _text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list joined."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content or []:
        text = getattr(part, "text", None)
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(parts)


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


@dataclass
class _Stream:
    """One AG-UI response: the events written so far and what they opened."""

    resp: web.StreamResponse
    thread_id: str
    run_id: str
    workflow_id: str
    state: dict[str, Any] = field(default_factory=dict[str, Any])
    text_id: str | None = None
    calls: set[str] = field(default_factory=set[str])
    answered: set[str] = field(default_factory=set[str])

    async def send(self, event: BaseEvent) -> None:
        from ag_ui.encoder import EventEncoder

        await self.resp.write(EventEncoder().encode(event).encode())

    async def end_text(self) -> None:
        from ag_ui.core import TextMessageEndEvent

        if self.text_id is not None:
            await self.send(TextMessageEndEvent(message_id=self.text_id))
            self.text_id = None

    async def text(self, ev: dict[str, Any]) -> None:
        from ag_ui.core import TextMessageContentEvent, TextMessageStartEvent

        delta = ev.get("delta")
        if not isinstance(delta, str) or not delta:
            return
        if self.text_id is None:
            self.text_id = f"{self.workflow_id}/msg-{ev.get('offset', 0)}"
            await self.send(TextMessageStartEvent(message_id=self.text_id, role="assistant"))
        await self.send(TextMessageContentEvent(message_id=self.text_id, delta=delta))

    async def tool_call(self, call_id: str, name: str, args: Any) -> None:
        """``TOOL_CALL_START``/``ARGS``/``END`` once per call id."""
        from ag_ui.core import ToolCallArgsEvent, ToolCallEndEvent, ToolCallStartEvent

        if call_id in self.calls:
            return
        self.calls.add(call_id)
        await self.end_text()
        await self.send(ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name))
        await self.send(
            ToolCallArgsEvent(
                tool_call_id=call_id, delta=args if isinstance(args, str) else json.dumps(args)
            )
        )
        await self.send(ToolCallEndEvent(tool_call_id=call_id))

    async def approval(self, call_id: str, name: str, args: Any) -> None:
        await self.tool_call(
            APPROVAL_PREFIX + call_id,
            APPROVAL_TOOL,
            {"tool_call_id": call_id, "name": name, "arguments": args},
        )

    async def result(self, ev: dict[str, Any]) -> None:
        from ag_ui.core import ToolCallResultEvent

        call_id = str(ev.get("tool_call_id", ""))
        if not call_id or call_id in self.answered:
            return  # the front end's own answer (a client tool): it has the tool message already
        await self.tool_call(call_id, str(ev.get("name", "")), ev.get("arguments", {}))
        content = ev.get("result")
        if not isinstance(content, str):
            content = json.dumps({"status": ev.get("status")})
        await self.send(
            ToolCallResultEvent(
                message_id=f"{self.workflow_id}/result-{call_id}",
                tool_call_id=call_id,
                content=content,
                role="tool",
            )
        )

    async def update_state(self, **changes: Any) -> None:
        """``STATE_DELTA`` replacing the top-level keys that changed."""
        from ag_ui.core import StateDeltaEvent

        ops = [
            {"op": "replace" if k in self.state else "add", "path": f"/{k}", "value": v}
            for k, v in changes.items()
            if self.state.get(k) != v
        ]
        if ops:
            self.state.update(changes)
            await self.send(StateDeltaEvent(delta=cast("Any", ops)))


def _state_of(run_id: str, st: Any) -> dict[str, Any]:
    """The AG-UI state of a run from its ``state`` query."""
    return {
        "run_id": run_id,
        "status": st.status,
        "turn": st.turn,
        "usage": st.usage.model_dump(mode="json"),
        "pending_approvals": [
            {"tool_call_id": p.tool_call_id, "name": p.name, "arguments": p.arguments}
            for p in _undecided(st)
        ],
    }


def _undecided(st: Any) -> list[Any]:
    """``state.pending_approvals`` less those decided already.

    A run drops them from the list only once every call of the turn has its verdict.
    """
    decided = {d.tool_call_id for d in st.decisions}
    return [p for p in st.pending_approvals if p.tool_call_id not in decided]


def _pending_client_tools(st: Any) -> list[Any]:
    """``state.pending_client_tools``: client tools' calls waiting for ``tool_result``."""
    return list(st.pending_client_tools)


async def _agui(request: web.Request) -> web.StreamResponse:
    from ag_ui.core import RunAgentInput, RunStartedEvent, StateSnapshotEvent

    body: RunAgentInput = await _body(request, RunAgentInput)
    ident = _who(request)
    mine = sorted(t for t in ident.tenants if t != "*")
    forwarded = body.forwarded_props if isinstance(body.forwarded_props, dict) else {}
    asked = forwarded.get("tenant_id")
    tenant = (
        asked if isinstance(asked, str) and asked else (mine[0] if len(mine) == 1 else "default")
    )
    if not ident.may_see(tenant):
        raise web.HTTPForbidden(
            text=json.dumps({"error": f"you may not use tenant {tenant!r}"}),
            content_type="application/json",
        )
    try:
        wf_id = thread_workflow_id(tenant, body.thread_id)
    except ValueError as e:
        raise _bad_request(str(e)) from None
    new = _new_messages(list(body.messages))
    answers = [m for m in new if m.role == "tool"]
    users = [m for m in new if m.role == "user" and _text(m.content).strip()]
    decisions = [(m, _decision(m)) for m in answers if m.tool_call_id.startswith(APPROVAL_PREFIX)]
    client = request.app[CLIENT_KEY]
    existing = await _thread_state(request, wf_id, tenant)
    if existing is None and not users:
        raise _bad_request("a new thread needs a user message")

    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            **NO_FRAMING_HEADERS,
        }
    )
    await resp.prepare(request)
    out = _Stream(resp, body.thread_id, body.run_id, wf_id)
    await out.send(RunStartedEvent(thread_id=body.thread_id, run_id=body.run_id))
    try:
        offset = 0
        if existing is not None:
            out.state = _state_of(wf_id, existing)
            await out.send(StateSnapshotEvent(snapshot=out.state))
            offset = await rc.stream_offset(client, wf_id)
        for m, d in decisions:
            await rc.decide(
                client,
                wf_id,
                m.tool_call_id.removeprefix(APPROVAL_PREFIX),
                "approve" if d.approved else "reject",
                ident.principal_id,
                arguments=d.arguments if d.approved else None,
                reason=d.reason,
                comment=d.comment,
                signer=request.app[SIGNER_KEY],
                roles=sorted(ident.roles),
            )
        for m in answers:
            if m.tool_call_id.startswith(APPROVAL_PREFIX):
                continue
            out.answered.add(m.tool_call_id)
            await _tool_result(client, wf_id, m, ident)
        if users:
            last = users[-1]
            req = _run_request(body, _text(last.content), last.id, ident, tenant)
            got = await rc.converse(
                client, req, wf_id, last.id, task_queue=request.app[QUEUE_KEY] or None
            )
            offset = 0 if got.duplicate else got.offset
            if existing is None:
                out.state = {
                    "run_id": wf_id,
                    "status": "running",
                    "turn": 0,
                    "usage": {},
                    "pending_approvals": [],
                }
                await out.send(StateSnapshotEvent(snapshot=out.state))
        elif existing is not None and not answers:
            # nothing new: tell what the run waits for, and end
            await _waiting_calls(out, existing)
            await _finish(out)
            return resp
        await _follow(client, out, offset)
    except (RPCError, WorkflowUpdateFailedError) as e:
        await _error(out, e)
    except ConnectionResetError:
        pass  # the front end went away; the run goes on
    return resp


def _decision(m: Any) -> Decision:
    """The decision a tool message carries; 400 when its content is not one."""
    try:
        return Decision.model_validate_json(_text(m.content))
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
            "content": _text(m.content),
            "is_error": bool(getattr(m, "error", None)),
            "principal_id": ident.principal_id,
            "roles": sorted(ident.roles),
        },
    )


async def _waiting_calls(out: _Stream, st: Any) -> None:
    """Tool calls for what the run waits on: its pending approvals and client tools' calls."""
    for p in _undecided(st):
        await out.approval(p.tool_call_id, p.name, p.arguments)
    for p in _pending_client_tools(st):
        await out.tool_call(p.tool_call_id, p.name, p.arguments)


async def _finish(out: _Stream, result: Any = None) -> None:
    from ag_ui.core import RunFinishedEvent

    await out.end_text()
    await out.send(RunFinishedEvent(thread_id=out.thread_id, run_id=out.run_id, result=result))


async def _error(out: _Stream, e: BaseException, code: str | None = None) -> None:
    from ag_ui.core import RunErrorEvent

    if isinstance(e, RPCError):
        msg = e.message
    elif isinstance(e, WorkflowUpdateFailedError):
        msg = str(e.cause or e)
    else:
        msg = str(e)
    await out.end_text()
    await out.send(RunErrorEvent(message=msg, code=code or type(e).__name__))


async def _events(client: Any, wf_id: str, offset: int) -> AsyncIterator[dict[str, Any] | None]:
    """The run's events from ``offset``; None after :data:`IDLE_CHECK_SECONDS` without one."""
    events = rc.follow(client, wf_id, offset)
    nxt: asyncio.Future[dict[str, Any]] | None = None
    try:
        while True:
            nxt = nxt or asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({nxt}, timeout=IDLE_CHECK_SECONDS)
            if not done:
                yield None
                continue
            try:
                ev = nxt.result()
            except StopAsyncIteration:
                return
            nxt = None
            yield ev
    finally:
        if nxt is not None and not nxt.done():
            nxt.cancel()
            with contextlib.suppress(BaseException):
                await nxt
        await events.aclose()


async def _follow(client: Any, out: _Stream, offset: int) -> None:
    """Translate the run's events until it waits for the front end or ends."""
    usage: dict[str, Any] = dict(out.state.get("usage") or {})
    pending: list[dict[str, Any]] = list(out.state.get("pending_approvals") or [])
    saw_running = False
    async for ev in _events(client, out.workflow_id, offset):
        if ev is None:
            await out.resp.write(b": keepalive\n\n")
            st = await rc.state(client, out.workflow_id)
            # a wait this request did not end (an approval it left unanswered, a pause), or one
            # that came without a status event; the next message only once the run took ours
            waits = st.status in WAITING and (saw_running or st.status != "waiting_for_message")
            if waits or _pending_client_tools(st):
                await _waiting_calls(out, st)
                await out.update_state(**_state_of(out.workflow_id, st))
                await _finish(out)
                return
            continue
        kind = ev.get("type")
        if kind == "text_delta":
            await out.text(ev)
        elif kind in ("model_retry", "model_finished"):
            await out.end_text()
            step = ev.get("usage")
            if isinstance(step, dict):
                for k, v in step.items():
                    if isinstance(v, int | float) and not isinstance(v, bool):
                        usage[str(k)] = usage.get(str(k), 0) + v
                await out.update_state(usage=dict(usage), turn=ev.get("turn"))
        elif kind == "tool_started":
            await out.tool_call(
                str(ev.get("tool_call_id")), str(ev.get("name")), ev.get("arguments", {})
            )
        elif kind == "tool_finished":
            await out.result(ev)
        elif kind == "approval_requested":
            call_id, name = str(ev.get("tool_call_id")), str(ev.get("name"))
            await out.approval(call_id, name, ev.get("arguments", {}))
            pending.append(
                {"tool_call_id": call_id, "name": name, "arguments": ev.get("arguments")}
            )
            await out.update_state(pending_approvals=list(pending))
        elif kind == "approval_decided":
            call_id = ev.get("tool_call_id")
            pending = [p for p in pending if p["tool_call_id"] != call_id]
            await out.update_state(pending_approvals=list(pending))
        elif kind == "client_tool_requested":
            await out.tool_call(
                str(ev.get("tool_call_id")), str(ev.get("name")), ev.get("arguments", {})
            )
            st = await rc.state(client, out.workflow_id)
            await _waiting_calls(out, st)
            await out.update_state(**_state_of(out.workflow_id, st))
            await _finish(out)
            return
        elif kind == "status":
            status = ev.get("status")
            await out.update_state(status=status, turn=ev.get("turn"))
            if status == "running":
                saw_running = True
            elif status in WAITING:
                if status == "awaiting_approval":
                    st = await rc.state(client, out.workflow_id)
                    await _waiting_calls(out, st)
                await _finish(out)
                return
        elif kind == "run_finished":
            res = ev.get("result") if isinstance(ev.get("result"), dict) else {}
            assert isinstance(res, dict)
            status = res.get("status")
            await out.update_state(status=status)
            if status == "completed":
                await _finish(out, {"output": res.get("output"), "run_id": out.workflow_id})
            else:
                reason = res.get("stopped_reason") or status
                await _error(out, RuntimeError(f"the run ended {status}: {reason}"), str(status))
            return
    await _finish(out)
