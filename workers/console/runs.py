"""The console's run handlers: list, state, start, decide, tool result, interrupt, message.

Routes in :func:`workers.console.serve.build_app`; every handler acts as the authenticated person,
on their tenants' runs only. :mod:`workers.console.serve` re-exports the body models.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field

from workers import client as rc
from workers.console.common import (
    CLIENT_KEY,
    QUEUE_KEY,
    SIGNER_KEY,
    WEB_UI_KEY,
    _body,
    _error,
    _own_run,
    _tenant_filter,
    _who,
)
from workflows.models import RunRequest, ToolResultUpdate

__all__ = ["DecideBody", "InterruptBody", "MessageBody", "StartBody", "ToolResultBody"]


class StartBody(BaseModel):
    """``POST /runs``."""

    input: str = Field(min_length=1)
    agent: str = "default"
    mode: str = "task"
    principal_id: str | None = None
    tenant_id: str | None = None


class DecideBody(BaseModel):
    """``POST /runs/{id}/approve`` and ``/reject``."""

    tool_call_id: str = Field(min_length=1)
    principal_id: str | None = None
    reason: str | None = None
    comment: str | None = None
    arguments: dict[str, Any] | None = None


class ToolResultBody(BaseModel):
    """``POST /runs/{id}/tool-result``: the result of a client tool's call."""

    tool_call_id: str = Field(min_length=1)
    content: str = ""
    is_error: bool = False
    principal_id: str | None = None


class InterruptBody(BaseModel):
    """``POST /runs/{id}/interrupt``."""

    principal_id: str | None = None
    reason: str = "interrupted from the console"


class MessageBody(BaseModel):
    """``POST /runs/{id}/messages``."""

    content: str = Field(min_length=1)
    principal_id: str | None = None


async def _runs(request: web.Request) -> web.Response:
    client = request.app[CLIENT_KEY]
    try:
        limit = max(1, min(200, int(request.query.get("limit", "30"))))
    except ValueError:
        return _error(400, "limit must be an integer")
    web_ui = request.app[WEB_UI_KEY]
    out = []
    query = rc.list_query() + _tenant_filter(_who(request))
    for wf in await rc.list_runs(client, query, limit=limit):
        sa = wf.search_attributes or {}
        out.append(
            {
                "run_id": wf.id,
                "status": wf.status.name.lower() if wf.status else "unknown",
                "agent_status": (sa.get("AgentStatus") or [None])[0],
                "agent": (sa.get("AgentName") or [None])[0],
                "started_at": wf.start_time.isoformat() if wf.start_time else None,
                "web_ui": web_ui(wf.id),
            }
        )
    return web.json_response({"runs": out})


async def _state(request: web.Request) -> web.Response:
    run_id = await _own_run(request)
    st = await rc.state(request.app[CLIENT_KEY], run_id)
    return web.json_response(
        {**st.model_dump(mode="json"), "run_id": run_id, "web_ui": request.app[WEB_UI_KEY](run_id)}
    )


async def _start(request: web.Request) -> web.Response:
    body = await _body(request, StartBody)
    if body.mode not in ("task", "chat"):
        return _error(400, "mode must be task or chat")
    ident = _who(request, body.principal_id)
    mine = sorted(t for t in ident.tenants if t != "*")
    tenant = body.tenant_id or (mine[0] if len(mine) == 1 else "default")
    if not ident.may_see(tenant):
        return _error(403, f"you may not start runs for tenant {tenant!r}")
    req = RunRequest(
        agent=body.agent,
        input=body.input,
        mode=body.mode,
        principal_id=ident.principal_id,
        tenant_id=tenant,
    )
    h = await rc.start_run(request.app[CLIENT_KEY], req, task_queue=request.app[QUEUE_KEY] or None)
    return web.json_response({"run_id": h.id, "web_ui": request.app[WEB_UI_KEY](h.id)}, status=201)


def _decider(decision: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def decide(request: web.Request) -> web.Response:
        body = await _body(request, DecideBody)
        ident = _who(request, body.principal_id)
        res = await rc.decide(
            request.app[CLIENT_KEY],
            await _own_run(request),
            body.tool_call_id,
            decision,
            ident.principal_id,
            arguments=body.arguments,
            reason=body.reason,
            comment=body.comment,
            signer=request.app[SIGNER_KEY],
            roles=sorted(ident.roles),
        )
        return web.json_response(res.model_dump(mode="json"))

    return decide


async def _tool_result(request: web.Request) -> web.Response:
    """Update ``tool_result`` as the authenticated person (refused: 409 with the reason)."""
    body = await _body(request, ToolResultBody)
    ident = _who(request, body.principal_id)
    upd = ToolResultUpdate(
        tool_call_id=body.tool_call_id,
        content=body.content,
        is_error=body.is_error,
        principal_id=ident.principal_id,
        roles=sorted(ident.roles),
    )
    res = await rc.tool_result(request.app[CLIENT_KEY], await _own_run(request), upd)
    return web.json_response(res.model_dump(mode="json"))


async def _interrupt(request: web.Request) -> web.Response:
    body = await _body(request, InterruptBody)
    ident = _who(request, body.principal_id)
    run_id = await _own_run(request)
    await rc.interrupt(request.app[CLIENT_KEY], run_id, ident.principal_id, body.reason)
    return web.json_response({"run_id": run_id, "sent": "interrupt"}, status=202)


async def _message(request: web.Request) -> web.Response:
    body = await _body(request, MessageBody)
    ident = _who(request, body.principal_id)
    run_id = await _own_run(request)
    await rc.send_message(request.app[CLIENT_KEY], run_id, body.content, ident.principal_id)
    return web.json_response({"run_id": run_id, "sent": "send_message"}, status=202)
