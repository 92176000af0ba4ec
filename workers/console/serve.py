"""``agentctl serve``: the runs' event streams over HTTP, and a run console page.

An aiohttp application (:func:`build_app`) on ``127.0.0.1:8235`` by default:

* ``GET /`` -- the run console (``workers/console/static/console.html``, plain HTML and JavaScript).
* ``GET /runs/{run_id}/events`` -- the run's events (docs/contract.md "Event stream") as Server-Sent
  Events: ``id`` is the item's offset, ``data`` its JSON; a ``Last-Event-ID`` header (sent by a
  browser's ``EventSource`` when it reconnects) or ``?from=N`` resumes; an ``end`` event follows
  ``run_finished``; a comment line keeps idle connections open every :data:`KEEPALIVE_SECONDS`.
* ``GET /api/runs`` -- recent runs (visibility query, newest first); ``GET /runs/{run_id}`` --
  the ``state`` query.
* ``POST /runs`` (``{"input", "agent"?, "mode"?, "principal_id"?, "tenant_id"?}``) starts a run;
  ``POST /runs/{run_id}/approve`` and ``/reject`` (``{"tool_call_id", "principal_id", "reason"?,
  "comment"?, "arguments"?}``) decide a pending call through the update ``decide``;
  ``POST /runs/{run_id}/interrupt`` (``{"principal_id", "reason"?}``) and ``/messages``
  (``{"content", "principal_id"}``) send those signals.

* ``GET /api/memory?tenant=T&q=...`` -- what runs remember about you (your ``user:`` scope);
  ``POST /api/memory/{item_id}/delete`` deletes one of your items for real (audited).
* ``GET /api/suites`` -- recent evaluation suites; ``GET /api/suites/{suite_id}`` -- a suite's report
  so far (the JSON of ``agentctl eval report --json``); ``GET /suites/{suite_id}`` -- the suite's
  live view (``workers/console/static/suite.html``: per variant, the paired comparison, per case).
* ``GET /api/session`` -- who you are (``principal_id``, ``roles``, ``tenants``) and the
  ``csrf_token`` the page sends back as ``X-CSRF-Token``.

Every request passes :mod:`workers.console.auth` first: a Host allow-list (421), authentication
(401; the local token by default), and for ``POST`` the JSON content type, the Origin /
``Sec-Fetch-Site`` check and the CSRF token (403). **The principal is the authenticated
identity**: a body's ``principal_id`` may only repeat it (another one: 403). A person sees and acts
on the runs of their own tenants only: the run list is filtered by ``TenantId`` and another
tenant's run answers 404.

Errors are JSON ``{"error": message}``: 400 bad input, 401 not authenticated, 403 refused,
404 no such run, 409 a decision the run refused (the validator's reason), 421 a Host this console
does not answer for, 503 the Temporal server is unreachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, Field, ValidationError
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from workers import client as rc
from workers import decision_keys
from workers.config import load_settings
from workers.console import auth as ca
from workflows.models import RunRequest

STATIC = Path(__file__).parent / "static"
KEEPALIVE_SECONDS = 15.0
"""Idle time after which the event stream sends a comment line."""
B = TypeVar("B", bound=BaseModel)
CLIENT_KEY = web.AppKey("client", Client)
WEB_UI_KEY = web.AppKey("web_ui", Callable[[str], str])
QUEUE_KEY = web.AppKey("task_queue", str)
AUTH_KEY = web.AppKey("auth", ca.Authenticator)
SIGNER_KEY = web.AppKey("signer", Ed25519PrivateKey)


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


class InterruptBody(BaseModel):
    """``POST /runs/{id}/interrupt``."""

    principal_id: str | None = None
    reason: str = "interrupted from the console"


class MessageBody(BaseModel):
    """``POST /runs/{id}/messages``."""

    content: str = Field(min_length=1)
    principal_id: str | None = None


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _who(request: web.Request, named: str | None = None) -> ca.Identity:
    """The authenticated person; raises 403 when the body ``named`` somebody else."""
    ident: ca.Identity = request[ca.IDENTITY_KEY]
    if named is not None and named != ident.principal_id:
        raise web.HTTPForbidden(
            text=json.dumps(
                {
                    "error": f"you are {ident.principal_id!r}: a request cannot name another "
                    f"principal ({named!r})"
                }
            ),
            content_type="application/json",
        )
    return ident


async def _own_run(request: web.Request) -> str:
    """The path's run id, after checking it belongs to one of the person's tenants (else 404)."""
    run_id = request.match_info["run_id"]
    ident = _who(request)
    if "*" in ident.tenants:
        return run_id
    desc = await rc.handle(request.app[CLIENT_KEY], run_id).describe()
    tenant = ((desc.search_attributes or {}).get("TenantId") or ["default"])[0]
    if not ident.may_see(str(tenant)):
        raise web.HTTPNotFound(
            text=json.dumps({"error": f"no such run: {run_id}"}), content_type="application/json"
        )
    return run_id


def _tenant_filter(ident: ca.Identity) -> str:
    if "*" in ident.tenants:
        return ""
    names = ", ".join(f"'{rc._quote(t)}'" for t in sorted(ident.tenants))  # noqa: SLF001
    return f" AND TenantId IN ({names})"


async def _body(request: web.Request, model: type[B]) -> B:
    """The request's JSON body as ``model``; raises an HTTP 400 naming what is wrong."""
    try:
        data = json.loads(await request.text() or "{}")
    except ValueError as e:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"the body is not JSON: {e}"}),
            content_type="application/json",
        ) from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        msg = "; ".join(f"{'.'.join(map(str, x['loc'])) or 'body'}: {x['msg']}" for x in e.errors())
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"bad request: {msg}"}), content_type="application/json"
        ) from None


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Temporal errors as JSON with a status that says what happened."""
    try:
        return await handler(request)
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return _error(404, f"no such run: {e.message}")
        if e.status == RPCStatusCode.UNAVAILABLE:
            return _error(503, f"the Temporal server is unavailable: {e.message}")
        return _error(400, e.message)
    except WorkflowUpdateFailedError as e:
        return _error(409, str(e.cause or e))


async def _index(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "console.html")


async def _session(request: web.Request) -> web.Response:
    ident = _who(request)
    return web.json_response(
        {**ident.public(), "csrf_token": request.app[AUTH_KEY].csrf_for(ident)},
        headers={"Cache-Control": "no-store"},
    )


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


class MemoryDeleteBody(BaseModel):
    """Body of ``POST /api/memory/{item_id}/delete``."""

    tenant_id: str | None = None


def _memory_tenant(ident: ca.Identity, asked: str | None) -> str:
    """The tenant whose memory the person asks for: ``asked``, or their only one, or default.

    Raises:
        web.HTTPNotFound: a tenant that is not theirs (as if it had no memory at all).
    """
    mine = sorted(t for t in ident.tenants if t != "*")
    tenant = asked or (mine[0] if len(mine) == 1 else "default")
    if not ident.may_see(tenant):
        raise web.HTTPNotFound(
            text=json.dumps({"error": "no such memory"}), content_type="application/json"
        )
    return tenant


async def _memory(request: web.Request) -> web.Response:
    """``GET /api/memory?tenant=T&q=...``: what runs remember about the person.

    Their own ``user:<principal>`` scope, newest first, or the best matches of ``q``.
    """
    from activities.memory import Namespace, open_store

    ident = _who(request)
    tenant = _memory_tenant(ident, request.query.get("tenant"))
    ns = Namespace(tenant_id=tenant, scope=f"user:{ident.principal_id}")
    store = open_store(load_settings().memory_store_url)
    q = request.query.get("q", "").strip()
    items = [h.item for h in store.search([ns], q, 20)] if q else store.list(ns, limit=50)
    return web.json_response(
        {
            "tenant_id": tenant,
            "scope": ns.scope,
            "items": [i.model_dump(mode="json") for i in items],
        },
        headers={"Cache-Control": "no-store"},
    )


async def _memory_delete(request: web.Request) -> web.Response:
    """``POST /api/memory/{item_id}/delete``: delete one of the person's own items for real.

    Logged in ``memory-audit.jsonl`` with the principal.
    """
    from activities.memory import open_store
    from workers.console import memory_audit

    body = await _body(request, MemoryDeleteBody)
    ident = _who(request)
    tenant = _memory_tenant(ident, body.tenant_id)
    settings = load_settings()
    store = open_store(settings.memory_store_url)
    item = store.get(tenant, request.match_info["item_id"])
    if item is None or item.namespace.scope != f"user:{ident.principal_id}":
        return _error(404, "no such memory item of yours")
    store.delete(tenant, item.id)
    memory_audit.record(settings.state_dir, "deleted", tenant, item, ident.principal_id)
    return web.json_response({"deleted": item.id})


async def _suite_tenant(client: Client, suite_id: str) -> str | None:
    """The tenant of an evaluation suite (its start input), or None when it has none to read."""
    from activities.evals.contracts import SuiteRequest

    raw = await client.get_workflow_handle(suite_id).query("request")
    return SuiteRequest.model_validate(raw).tenant_id if raw else None


async def _suites(request: web.Request) -> web.Response:
    """``GET /api/suites``: recent evaluation suites of the person's tenants, newest first."""
    client, ident = request.app[CLIENT_KEY], _who(request)
    out = []
    async for wf in client.list_workflows("WorkflowType = 'EvalSuite'", limit=20):
        if "*" not in ident.tenants:
            try:
                tenant = await _suite_tenant(client, wf.id)
            except RPCError:
                continue
            if tenant is None or not ident.may_see(tenant):
                continue
        out.append(
            {
                "suite_id": wf.id,
                "status": wf.status.name.lower() if wf.status else "unknown",
                "started_at": wf.start_time.isoformat() if wf.start_time else None,
            }
        )
    return web.json_response({"suites": out})


async def _suite(request: web.Request) -> web.Response:
    """``GET /api/suites/{id}``: the suite's report so far (``agentctl eval report --json``)."""
    from activities.evals.report import build_report
    from workers.eval_client import progress

    suite_id, ident = request.match_info["suite_id"], _who(request)
    client = request.app[CLIENT_KEY]
    if "*" not in ident.tenants:
        tenant = await _suite_tenant(client, suite_id)
        if tenant is None or not ident.may_see(tenant):
            return _error(404, f"no such suite: {suite_id}")
    report = build_report(await progress(client, suite_id))
    return web.json_response(report, headers={"Cache-Control": "no-store"})


async def _suite_page(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "suite.html")


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
        mode=body.mode,  # type: ignore[arg-type] - a str from the form; RunRequest validates it
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


def _from_offset(request: web.Request) -> int:
    """Where the stream starts: after ``Last-Event-ID``, else ``?from=``, else 0."""
    last = request.headers.get("Last-Event-ID")
    raw = str(int(last) + 1) if last and last.strip().isdigit() else request.query.get("from", "0")
    if not raw.isdigit():
        raise web.HTTPBadRequest(
            text=json.dumps({"error": "from must be a non-negative integer"}),
            content_type="application/json",
        )
    return int(raw)


async def _events(request: web.Request) -> web.StreamResponse:
    client = request.app[CLIENT_KEY]
    run_id = await _own_run(request)
    start = _from_offset(request)
    await rc.handle(client, run_id).describe()  # 404 as JSON before the stream starts
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
        }
    )
    await resp.prepare(request)
    events = rc.follow(client, run_id, start)
    nxt: asyncio.Future[dict[str, Any]] | None = None
    try:
        while True:
            nxt = nxt or asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({nxt}, timeout=KEEPALIVE_SECONDS)
            if not done:
                await resp.write(b": keepalive\n\n")
                continue
            try:
                ev = nxt.result()
            except StopAsyncIteration:
                break
            nxt = None
            await resp.write(f"id: {ev['offset']}\ndata: {json.dumps(ev)}\n\n".encode())
        await resp.write(b"event: end\ndata: {}\n\n")
    except (RPCError, WorkflowUpdateFailedError) as e:
        msg = e.message if isinstance(e, RPCError) else str(e.cause or e)
        await resp.write(f"event: error\ndata: {json.dumps({'error': msg})}\n\n".encode())
    except ConnectionResetError:
        pass  # the subscriber went away
    finally:
        if nxt is not None and not nxt.done():
            nxt.cancel()
            with contextlib.suppress(BaseException):
                await nxt
        await events.aclose()
    return resp


def build_app(
    client: Client,
    web_ui_url: Callable[[str], str],
    task_queue: str | None = None,
    *,
    gate: ca.Gate,
    signer: Ed25519PrivateKey | None = None,
) -> web.Application:
    """The application: routes above, ``client`` for Temporal, ``web_ui_url(run_id)`` for links.

    ``task_queue`` is where ``POST /runs`` starts runs (None: ``AGENT_TASK_QUEUE``); ``gate``
    says who may use it (:mod:`workers.console.auth`); ``signer`` signs its decisions (None:
    a fresh key, whose signatures only a spec listing its public key accepts).
    """
    app = web.Application(middlewares=[ca.guard(gate), _errors], client_max_size=1024 * 1024)
    app[AUTH_KEY] = gate.auth
    app[SIGNER_KEY] = signer or Ed25519PrivateKey.generate()
    app[CLIENT_KEY] = client
    app[WEB_UI_KEY] = web_ui_url
    app[QUEUE_KEY] = task_queue or ""
    app.router.add_get("/", _index)
    app.router.add_static("/static/", STATIC)
    app.router.add_get("/api/session", _session)
    app.router.add_get("/api/runs", _runs)
    app.router.add_post("/runs", _start)
    app.router.add_get("/runs/{run_id}", _state)
    app.router.add_get("/runs/{run_id}/events", _events)
    app.router.add_post("/runs/{run_id}/approve", _decider("approve"))
    app.router.add_post("/runs/{run_id}/reject", _decider("reject"))
    app.router.add_post("/runs/{run_id}/interrupt", _interrupt)
    app.router.add_post("/runs/{run_id}/messages", _message)
    app.router.add_get("/api/memory", _memory)
    app.router.add_post("/api/memory/{item_id}/delete", _memory_delete)
    app.router.add_get("/api/suites", _suites)
    app.router.add_get("/api/suites/{suite_id}", _suite)
    app.router.add_get("/suites/{suite_id}", _suite_page)
    return app


async def start_server(
    client: Client,
    host: str,
    port: int,
    web_ui_url: Callable[[str], str],
    task_queue: str | None = None,
    auth: ca.Authenticator | None = None,
) -> tuple[web.AppRunner, str]:
    """Start serving; returns the runner (``await runner.cleanup()`` stops it) and the base URL.

    ``auth`` None: as the settings say (``AGENT_CONSOLE_AUTH``, the local token by default).

    Raises:
        OSError: the address is in use or cannot be bound.
        workers.console.auth.AuthConfigError: the settings cannot work on ``host`` (say what to
            set), e.g. the local token on a non-loopback address.
    """
    settings = load_settings()
    auth = auth or ca.authenticator_from_settings(settings, host)
    gate = ca.Gate.build(
        auth,
        host,
        ca.split_list(settings.console_allowed_hosts),
        ca.split_list(settings.console_allowed_origins),
    )
    runner = web.AppRunner(
        build_app(
            client,
            web_ui_url,
            task_queue,
            gate=gate,
            signer=decision_keys.load_or_create(settings.state_dir),
        ),
        access_log=None,
        shutdown_timeout=1.0,
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    return runner, f"http://{host}:{bound}"


async def run_server(
    client: Client, host: str, port: int, web_ui_url: Callable[[str], str]
) -> None:
    """Serve until cancelled (Ctrl-C); prints the console's address."""
    runner, url = await start_server(client, host, port, web_ui_url)
    settings = load_settings()
    login = (
        f"{url}/?token={ca.read_token(settings.state_dir)}"
        if settings.console_auth == "token"
        else f"{url}/"
    )
    print(f"run console: {login}  (events: {url}/runs/RUN_ID/events; Ctrl-C to stop)", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
