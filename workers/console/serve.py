"""``agentctl serve``: the runs' event streams over HTTP, and a run console page.

An aiohttp application (:func:`build_app`) on ``127.0.0.1:8235`` by default:

* ``GET /`` -- the run console (``workers/console/static/console.html``, plain HTML and JavaScript).
* ``GET /runs/{run_id}/events`` -- the run's events (docs/contract.md "Event stream") as Server-Sent
  Events: ``id`` is the item's offset, ``data`` its JSON; a ``Last-Event-ID`` header (sent by a
  browser's ``EventSource`` when it reconnects) or ``?from=N`` resumes; an ``end`` event follows
  ``run_finished``; a comment line keeps idle connections open every :data:`KEEPALIVE_SECONDS`.
* ``GET /api/runs`` -- recent runs (visibility query, newest first; filters ``status``, ``agent``,
  ``principal``, ``parent``); ``GET /runs/{run_id}`` -- the run's page: the ``state`` query, or
  its history when it is closed or no worker answers (:mod:`workers.console.run_view`).
* ``POST /runs`` (``{"input", "agent"?, "mode"?, "principal_id"?, "tenant_id"?}``) starts a run;
  ``POST /runs/{run_id}/approve`` and ``/reject`` (``{"tool_call_id", "principal_id", "reason"?,
  "comment"?, "arguments"?}``) decide a pending call through the update ``decide``;
  ``POST /runs/{run_id}/interrupt`` (``{"principal_id", "reason"?}``), ``/pause``, ``/resume``
  (``{"principal_id"?}``) and ``/messages`` (``{"content", "principal_id"}``) send those signals;
  ``POST /runs/{run_id}/tool-result`` (``{"tool_call_id", "content", "is_error"?}``) gives a
  client tool's result through the update ``tool_result``.

* ``GET /api/memory?tenant=T&q=...`` -- what runs remember about you (your ``user:`` scope);
  ``POST /api/memory/{item_id}/delete`` deletes one of your items for real (audited).
* ``GET /api/suites`` -- recent evaluation suites; ``GET /api/suites/{suite_id}`` -- a suite's report
  so far (the JSON of ``agentctl eval report --json``); ``GET /suites/{suite_id}`` -- the suite's
  live view (``workers/console/static/suite.html``: per variant, the paired comparison, per case).
* ``POST /agui`` -- the AG-UI protocol: a ``RunAgentInput`` in, AG-UI events out as Server-Sent
  Events; the thread is a durable conversation run (:mod:`workers.console.agui`, docs/agui.md).
* ``POST /callbacks/{token}`` -- an outside system finishes a tool call that handed it a
  callback URL (``{"result": ...}`` or ``{"error": "..."}``; :mod:`workers.console.callbacks`).
  No login: the signed token is the credential; rate and size limited.
* ``GET /api/session`` -- who you are (``principal_id``, ``roles``, ``tenants``) and the
  ``csrf_token`` the page sends back as ``X-CSRF-Token``.

Every request passes :mod:`workers.console.auth` first: a Host allow-list (421), authentication
(401; the local token by default), and for ``POST`` the JSON content type, the Origin /
``Sec-Fetch-Site`` check and the CSRF token (403). **The principal is the authenticated
identity**: a body's ``principal_id`` may only repeat it (another one: 403). A person sees and acts
on the runs of their own tenants only: the run list is filtered by ``TenantId`` and another
tenant's run answers the same 404 as a missing run or a workflow of another type.

Every response forbids framing (``X-Frame-Options: DENY``, ``Content-Security-Policy:
frame-ancestors 'none'``): another page cannot overlay the console under a decoy (clickjacking).

Errors are JSON ``{"error": message}``: 400 bad input, 401 not authenticated, 403 refused,
404 no such run, 409 a decision the run refused (the validator's reason), 421 a Host this console
does not answer for, 503 the Temporal server is unreachable.

The handlers live in modules by job: :mod:`workers.console.runs` (the runs),
:mod:`workers.console.events` (the event stream), :mod:`workers.console.agui` (AG-UI),
:mod:`workers.console.memory`,
:mod:`workers.console.suites`, and :mod:`workers.console.common` what they share; this module
builds the application and serves it, and re-exports the public names of the others.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from collections.abc import Callable

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client

from activities.callbacks import CallbackSigner
from workers import callback_keys, decision_keys
from workers.config import load_settings
from workers.console import auth as ca
from workers.console.agui import _agui
from workers.console.callbacks import CALLBACKS_KEY, CallbackState, _callback
from workers.console.common import (
    AUTH_KEY,
    CLIENT_KEY,
    QUEUE_KEY,
    SIGNER_KEY,
    STATIC,
    WEB_UI_KEY,
    B,
    _errors,
    _no_framing,
    _who,
)
from workers.console.events import KEEPALIVE_SECONDS, _events
from workers.console.memory import MemoryDeleteBody, _memory, _memory_delete
from workers.console.runs import (
    DecideBody,
    InterruptBody,
    MessageBody,
    StartBody,
    ToolResultBody,
    _decider,
    _interrupt,
    _message,
    _pauser,
    _runs,
    _start,
    _state,
    _tool_result,
)
from workers.console.suites import _suite, _suite_page, _suites
from workers.metrics_server import MetricsEndpoint

__all__ = [
    "AUTH_KEY",
    "B",
    "CLIENT_KEY",
    "KEEPALIVE_SECONDS",
    "QUEUE_KEY",
    "SIGNER_KEY",
    "STATIC",
    "WEB_UI_KEY",
    "DecideBody",
    "InterruptBody",
    "MemoryDeleteBody",
    "MessageBody",
    "StartBody",
    "ToolResultBody",
    "build_app",
    "run_server",
    "start_server",
]


async def _index(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "console.html")


async def _session(request: web.Request) -> web.Response:
    ident = _who(request)
    return web.json_response(
        {**ident.public(), "csrf_token": request.app[AUTH_KEY].csrf_for(ident)},
        headers={"Cache-Control": "no-store"},
    )


def build_app(
    client: Client,
    web_ui_url: Callable[[str], str],
    task_queue: str | None = None,
    *,
    gate: ca.Gate,
    signer: Ed25519PrivateKey | None = None,
    callbacks: CallbackSigner | None = None,
) -> web.Application:
    """The application: routes above, ``client`` for Temporal, ``web_ui_url(run_id)`` for links.

    ``task_queue`` is where ``POST /runs`` starts runs (None: ``AGENT_TASK_QUEUE``); ``gate``
    says who may use it (:mod:`workers.console.auth`); ``signer`` signs its decisions (None:
    a fresh key, whose signatures only a spec listing its public key accepts); ``callbacks``
    holds the key callback tokens are checked with (None: a fresh key, which no worker signs
    with: every callback is refused as forged).
    """
    app = web.Application(
        middlewares=[_no_framing, ca.guard(gate), _errors], client_max_size=1024 * 1024
    )
    app[AUTH_KEY] = gate.auth
    app[SIGNER_KEY] = signer or Ed25519PrivateKey.generate()
    app[CLIENT_KEY] = client
    app[WEB_UI_KEY] = web_ui_url
    app[QUEUE_KEY] = task_queue or ""
    app[CALLBACKS_KEY] = CallbackState(
        callbacks or CallbackSigner(secrets.token_bytes(32), "http://127.0.0.1")
    )
    app.router.add_get("/", _index)
    app.router.add_static("/static/", STATIC)
    app.router.add_get("/api/session", _session)
    app.router.add_get("/api/runs", _runs)
    app.router.add_post("/runs", _start)
    app.router.add_get("/runs/{run_id}", _state)
    app.router.add_get("/runs/{run_id}/events", _events)
    app.router.add_post("/runs/{run_id}/approve", _decider("approve"))
    app.router.add_post("/runs/{run_id}/reject", _decider("reject"))
    app.router.add_post("/runs/{run_id}/tool-result", _tool_result)
    app.router.add_post("/runs/{run_id}/interrupt", _interrupt)
    app.router.add_post("/runs/{run_id}/messages", _message)
    app.router.add_post("/runs/{run_id}/pause", _pauser("pause"))
    app.router.add_post("/runs/{run_id}/resume", _pauser("resume"))
    app.router.add_post("/callbacks/{token}", _callback)
    app.router.add_get("/api/memory", _memory)
    app.router.add_post("/api/memory/{item_id}/delete", _memory_delete)
    app.router.add_get("/api/suites", _suites)
    app.router.add_get("/api/suites/{suite_id}", _suite)
    app.router.add_get("/suites/{suite_id}", _suite_page)
    app.router.add_post("/agui", _agui)
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
            callbacks=callback_keys.signer(settings),
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
    client: Client,
    host: str,
    port: int,
    web_ui_url: Callable[[str], str],
    metrics: MetricsEndpoint | None = None,
) -> None:
    """Serve until cancelled (Ctrl-C); prints the console's address.

    In token mode the login link (``?token=``) is printed only to a terminal: output that goes to
    a file (``make demo``'s ``logs/console.log``) names the token's file (mode 0600) instead, so
    the token is never written where another local user may read it.

    ``metrics`` (``AGENT_METRICS_ADDRESS``, started by the caller): its ``/healthz`` answers 200
    while the console serves, and its ``/metrics`` counts runs by status through ``client``.
    """
    runner, url = await start_server(client, host, port, web_ui_url)
    if metrics is not None:
        metrics.watch(client)
        metrics.health.phase = "serving"
    print(f"run console: {_login_line(url)}  (events: {url}/runs/RUN_ID/events; Ctrl-C to stop)")
    sys.stdout.flush()
    try:
        await asyncio.Event().wait()
    finally:
        if metrics is not None:
            metrics.health.phase = "stopped"
            metrics.watch(None)
        await runner.cleanup()


def _login_line(url: str) -> str:
    """Where to log in: the ``?token=`` link on a terminal, else the address and the token's file."""
    settings = load_settings()
    if settings.console_auth != "token":
        return f"{url}/"
    if sys.stdout.isatty():
        return f"{url}/?token={ca.read_token(settings.state_dir)}"
    return f"{url}/  (log in with {url}/?token=TOKEN, TOKEN in {ca.token_file(settings.state_dir)})"
