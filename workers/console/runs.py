"""The console's run handlers: list, page, start, decide, tool result, interrupt, pause, message.

Routes in :func:`workers.console.serve.build_app`; every handler acts as the authenticated person,
on their tenants' runs only. :mod:`workers.console.serve` re-exports the body models.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web
from pydantic import BaseModel, Field

from workers import client as rc
from workers.console import run_view as rv
from workers.console.common import (
    CLIENT_KEY,
    QUEUE_KEY,
    SIGNER_KEY,
    WEB_UI_KEY,
    _body,
    _error,
    _own_run,
    _own_run_described,
    _tenant_filter,
    _who,
)
from workers.listing import quote
from workflows.models import RunRequest, ToolResultUpdate

__all__ = [
    "MAX_FILTER_CHARS",
    "DecideBody",
    "InterruptBody",
    "MessageBody",
    "PauseBody",
    "StartBody",
    "ToolResultBody",
    "list_filter",
]


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


class PauseBody(BaseModel):
    """``POST /runs/{id}/pause`` and ``/resume``."""

    principal_id: str | None = None


class MessageBody(BaseModel):
    """``POST /runs/{id}/messages``."""

    content: str = Field(min_length=1)
    principal_id: str | None = None


MAX_FILTER_CHARS = 512
"""Longest agent, person or parent filter value (as a run request's names, MAX_NAME_CHARS)."""


def list_filter(query: Mapping[str, str]) -> str:
    """The visibility clauses (`` AND ...``) of ``GET /api/runs``'s filters.

    ``status`` (:func:`workers.console.run_view.status_filter`), ``agent`` (``AgentName``),
    ``principal`` (``PrincipalId``), each exact; ``parent``: the runs a workflow started (an
    evaluation suite's or a run's children), else only runs no workflow started (children are
    listed under their suite or parent, not among people's runs). Continued-as-new executions
    are left out (the run's latest execution stands for it).

    Raises:
        ValueError: a value is unknown (status) or longer than :data:`MAX_FILTER_CHARS`.
    """
    for name in ("agent", "principal", "parent"):
        if len(query.get(name, "")) > MAX_FILTER_CHARS:
            raise ValueError(f"{name} is longer than {MAX_FILTER_CHARS} characters")
    out = rc.list_query(
        agent=query.get("agent") or None, principal=query.get("principal") or None
    ).removeprefix(rc.list_query())
    if query.get("status"):
        out += rv.status_filter(query["status"])
    parent = query.get("parent")
    if parent:
        out += f" AND ParentWorkflowId = '{quote(parent)}'"
    else:
        out += " AND ParentWorkflowId IS NULL"
    return out + " AND ExecutionStatus != 'ContinuedAsNew'"


async def _runs(request: web.Request) -> web.Response:
    """``GET /api/runs``: recent runs of the person's tenants, newest first, as filtered.

    Query: ``limit`` (1-200, default 30), ``status``, ``agent``, ``principal``, ``parent``
    (:func:`list_filter`). Each row: :func:`workers.console.run_view.list_row`. 400 on a bad
    filter.
    """
    client = request.app[CLIENT_KEY]
    try:
        limit = max(1, min(200, int(request.query.get("limit", "30"))))
    except ValueError:
        return _error(400, "limit must be an integer")
    try:
        narrowed = list_filter(request.query)
    except ValueError as e:
        return _error(400, str(e))
    web_ui = request.app[WEB_UI_KEY]
    query = rc.list_query() + _tenant_filter(_who(request)) + narrowed
    rows = [await rv.list_row(wf, web_ui(wf.id)) for wf in await rc.list_runs(client, query, limit)]
    return web.json_response({"runs": rows}, headers={"Cache-Control": "no-store"})


async def _state(request: web.Request) -> web.Response:
    """``GET /runs/{id}``: the run's page (:func:`workers.console.run_view.run_page`)."""
    run_id, desc = await _own_run_described(request)
    page = await rv.run_page(request.app[CLIENT_KEY], run_id, desc)
    return web.json_response(
        {**page, "run_id": run_id, "web_ui": request.app[WEB_UI_KEY](run_id)},
        headers={"Cache-Control": "no-store"},
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
        roles=sorted(ident.roles),
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


def _pauser(signal: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``POST /runs/{id}/pause`` or ``/resume`` (``{"principal_id"?}``): that signal, 202."""

    async def send(request: web.Request) -> web.Response:
        body = await _body(request, PauseBody)
        ident = _who(request, body.principal_id)
        run_id = await _own_run(request)
        act = rc.pause if signal == "pause" else rc.resume
        await act(request.app[CLIENT_KEY], run_id, ident.principal_id)
        return web.json_response({"run_id": run_id, "sent": signal}, status=202)

    return send


async def _message(request: web.Request) -> web.Response:
    body = await _body(request, MessageBody)
    ident = _who(request, body.principal_id)
    run_id = await _own_run(request)
    await rc.send_message(request.app[CLIENT_KEY], run_id, body.content, ident.principal_id)
    return web.json_response({"run_id": run_id, "sent": "send_message"}, status=202)
