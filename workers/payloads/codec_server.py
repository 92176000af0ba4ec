"""Codec server for the Temporal Web UI and CLI: shows externally stored payloads as they are.

With external payload storage (:mod:`workers.payloads.converter`) the history holds references
(``temporal.api.sdk.v1.ExternalStorageReference``) instead of large payloads. The Web UI, started
with ``--ui-codec-endpoint http://127.0.0.1:8234`` (``ui_codec_endpoint`` in ``temporal-dev.yml``),
sends every payload it displays to this server, which replaces each reference by the stored
payload so the UI shows the real JSON. ``temporal workflow show --codec-endpoint ...`` works too.

Protocol (Temporal's remote codec protocol; only the last path segment counts, so
``http://127.0.0.1:8234/any/prefix/decode`` works too)::

    POST /decode    body {"payloads": [{"metadata": {"encoding": "<base64>", ...},
                                        "data": "<base64>"}, ...]}
                    -> 200 {"payloads": [...]}: same length and order; references resolved,
                       other payloads unchanged.
    POST /encode    same shapes; payloads of at least the threshold are stored and replaced by
                    references (what the SDK would do), smaller ones unchanged.
    OPTIONS /decode, /encode
                    CORS preflight: 200 with Access-Control-Allow-Origin (the requesting origin
                    when allowed), -Methods (POST, OPTIONS), -Headers (Content-Type, X-Namespace,
                    Authorization), -Credentials (true), -Max-Age.
    GET /healthz    200 {"status": "ok"}; with a credential (below) also the store's settings
                    {"store": "local", "payload_dir": "...", "threshold_bytes": N, ...}.

Every route, ``/healthz`` included, first checks the ``Host`` header against the console's
allow-list (:func:`workers.console.auth.allowed_hosts`: the bind address, ``127.0.0.1``,
``localhost``, ``::1`` and ``AGENT_CONSOLE_ALLOWED_HOSTS``): another name gets 421, so a
DNS-rebinding page cannot read the server under its own name.

The ``X-Namespace`` header the UI sends is accepted (references are not namespace-scoped here).
Requests carrying an ``Origin`` header are refused (403) unless the origin is allowed -- by
default the dev server's Web UI (``http://127.0.0.1:8233`` and ``http://localhost:8233``, from
``temporal-dev.yml``) -- so another web page cannot read payloads or write files through it;
requests without ``Origin`` (CLI, curl) are served. The server binds to 127.0.0.1 by default.

A reference that cannot be resolved (file pruned, wrong ``AGENT_PAYLOAD_DIR``) does not fail the
whole request: its slot holds a ``json/plain`` payload ``{"codec_error": "<message>",
"reference": {"driver_name": ..., "claim_data": {...}}}`` so the UI shows what is missing.
A body that is not valid JSON of that shape gives 400 ``{"error": "..."}``.

Run it::

    python -m workers.payloads.codec_server [--host 127.0.0.1] [--port 8234] \
        [--allow-origin URL ...]

It prints ``codec_server_started url=...`` on stderr once listening; SIGTERM/Ctrl-C stop it.

Settings (``workers.config``): ``AGENT_CODEC_PORT``, ``AGENT_PAYLOAD_STORE``, ``AGENT_PAYLOAD_DIR``
(the same folder as the worker's), ``AGENT_S3_BUCKET``/``AGENT_S3_PREFIX``.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import typer
from aiohttp import hdrs, web
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import ExternalStorage

from workers.cli.entrypoints import run_command
from workers.config import Settings, load_settings
from workers.console.auth import (
    LOOPBACK_NAMES,
    Authenticator,
    allowed_hosts,
    authenticator_from_settings,
    host_allowed,
    split_list,
)
from workers.payloads.converter import (
    build_external_storage,
    reference_of,
    resolve_references,
    store_large_payloads,
)
from workers.payloads.encryption import AesGcmCodec, codec_from_setting

__all__ = [
    "CodecServer",
    "build_codec_app",
    "default_allowed_origins",
    "main",
    "start_codec_server",
]

logger = logging.getLogger(__name__)

ALLOWED_HEADERS = "Content-Type, X-Namespace, Authorization"
MAX_BODY_BYTES = 256 * 1024 * 1024
"""Largest request body accepted (bytes): a few 50 MiB payloads, base64-encoded."""

_STORAGE_KEY: web.AppKey[ExternalStorage] = web.AppKey("storage", ExternalStorage)
_ORIGINS_KEY: web.AppKey[frozenset[str]] = web.AppKey("origins", frozenset)
_INFO_KEY: web.AppKey[dict[str, Any]] = web.AppKey("info", dict)
_AUTH_KEY = web.AppKey("auth", Authenticator)
_CODEC_KEY = web.AppKey("codec", AesGcmCodec)
_HOSTS_KEY: web.AppKey[frozenset[str]] = web.AppKey("hosts", frozenset)


def default_allowed_origins(ui_url: str | None = None) -> list[str]:
    """Origins of the Web UI: ``ui_url`` and the same URL with 127.0.0.1 <-> localhost swapped.

    Args:
        ui_url: the Web UI's URL; default: the one of ``temporal-dev.yml`` (see
            :func:`workers.local.dev_server.find_dev_config`), else ``http://127.0.0.1:8233``.

    Returns:
        Origins (``scheme://host:port``, no trailing slash), the given one first.
    """
    if ui_url is None:
        from workers.local.dev_server import find_dev_config, load_dev_config

        path = find_dev_config()
        ui_url = (load_dev_config(path).ui_url if path else None) or "http://127.0.0.1:8233"
    parts = urlsplit(ui_url.rstrip("/"))
    origin = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    out = [origin]
    host = parts.hostname or ""
    swap = {"127.0.0.1": "localhost", "localhost": "127.0.0.1"}.get(host)
    if swap:
        port = f":{parts.port}" if parts.port else ""
        out.append(f"{parts.scheme}://{swap}{port}")
    return out


# --------------------------------------------------------------------------- the app


def _cors_headers(request: web.Request) -> dict[str, str]:
    origin = request.headers.get(hdrs.ORIGIN)
    if not origin or not _origin_allowed(request, origin):
        return {}
    headers: dict[str, str] = {
        hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: origin,
        hdrs.ACCESS_CONTROL_ALLOW_METHODS: "POST, OPTIONS",
        hdrs.ACCESS_CONTROL_ALLOW_HEADERS: ALLOWED_HEADERS,
        hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS: "true",
        hdrs.ACCESS_CONTROL_MAX_AGE: "86400",
        hdrs.VARY: "Origin",
    }
    if request.headers.get("Access-Control-Request-Private-Network") == "true":
        headers["Access-Control-Allow-Private-Network"] = "true"
    return headers


def _origin_allowed(request: web.Request, origin: str) -> bool:
    allowed = request.app[_ORIGINS_KEY]
    return "*" in allowed or origin.rstrip("/") in allowed


@web.middleware
async def _host_guard(request: web.Request, handler: Any) -> web.StreamResponse:
    """421 for a ``Host`` the server does not answer for (DNS rebinding), on every route."""
    if not host_allowed(request.app[_HOSTS_KEY], request.headers.get(hdrs.HOST)):
        logger.warning("codec request for host %r refused", request.headers.get(hdrs.HOST))
        return web.json_response(
            {"error": "this codec server does not answer for that host name"}, status=421
        )
    return await handler(request)


async def _authenticated(request: web.Request) -> bool:
    """Whether the request carries the credential ``auth`` asks for (True without ``auth``)."""
    auth = request.app.get(_AUTH_KEY)
    return auth is None or await auth.identify(request) is not None


@web.middleware
async def _origin_guard(request: web.Request, handler: Any) -> web.StreamResponse:
    origin = request.headers.get(hdrs.ORIGIN)
    if origin and not _origin_allowed(request, origin):
        logger.warning("codec request from origin %s refused", origin)
        allowed = ", ".join(sorted(request.app[_ORIGINS_KEY]))
        return web.json_response(
            {"error": f"origin {origin} is not allowed (allowed: {allowed})"}, status=403
        )
    if request.method == "POST" and request.path != "/healthz":
        if not await _authenticated(request):
            return web.json_response(
                {
                    "error": "not authenticated: send Authorization: Bearer <console token> or the "
                    "console's cookie (tick 'include cross-origin credentials' in the Web UI)"
                },
                status=401,
                headers=_cors_headers(request),
            )
    try:
        resp = await handler(request)
    except web.HTTPException as e:
        e.headers.update(_cors_headers(request))
        raise
    resp.headers.update(_cors_headers(request))
    return resp


async def _preflight(request: web.Request) -> web.Response:
    return web.Response(status=200)


async def _read_payloads(request: web.Request) -> list[Payload]:
    body = await request.read()
    try:
        msg = json_format.Parse(body or b"{}", Payloads(), ignore_unknown_fields=True)
    except (json_format.ParseError, UnicodeDecodeError) as e:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f'expected {{"payloads": [...]}} in Temporal JSON: {e}'}),
            content_type="application/json",
        ) from None
    return list(msg.payloads)


def _payloads_response(payloads: Sequence[Payload]) -> web.Response:
    body = json_format.MessageToDict(Payloads(payloads=payloads))
    body.setdefault("payloads", [])
    return web.json_response(body, dumps=lambda o: json.dumps(o, separators=(",", ":")))


def _error_payload(original: Payload, error: BaseException) -> Payload:
    ref = reference_of(original)
    value = {
        "codec_error": f"{type(error).__name__}: {error}",
        "reference": {"driver_name": ref.driver_name, "claim_data": dict(ref.claim_data)}
        if ref is not None
        else None,
    }
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())


async def _decode(request: web.Request) -> web.Response:
    payloads = await _read_payloads(request)
    storage = request.app[_STORAGE_KEY]
    results = await resolve_references(storage, payloads, return_exceptions=True)
    out: list[Payload] = []
    codec = request.app.get(_CODEC_KEY)
    for original, res in zip(payloads, results, strict=True):
        if isinstance(res, BaseException):
            logger.warning("cannot resolve an external payload reference: %s", res)
            out.append(_error_payload(original, res))
            continue
        try:
            out.append(codec.decrypt(res) if codec is not None else res)
        except ValueError as e:
            logger.warning("cannot decrypt a payload: %s", e)
            out.append(_error_payload(original, e))
    logger.debug(
        "decode namespace=%s payloads=%d", request.headers.get("X-Namespace"), len(payloads)
    )
    return _payloads_response(out)


async def _encode(request: web.Request) -> web.Response:
    payloads = await _read_payloads(request)
    storage = request.app[_STORAGE_KEY]
    codec = request.app.get(_CODEC_KEY)
    if codec is not None:
        payloads = [codec.encrypt(p) for p in payloads]
    try:
        out = await store_large_payloads(storage, payloads)
    except Exception as e:  # noqa: BLE001 - reported to the caller
        logger.exception("encode failed")
        return web.json_response({"error": f"{type(e).__name__}: {e}"}, status=500)
    return _payloads_response(out)


async def _health(request: web.Request) -> web.Response:
    """``{"status": "ok"}``; the store's settings (``info``) only to an authenticated caller."""
    if not await _authenticated(request):
        return web.json_response({"status": "ok"})
    return web.json_response({"status": "ok", **request.app[_INFO_KEY]})


def build_codec_app(
    storage: ExternalStorage,
    *,
    allowed_origins: Iterable[str] | None = None,
    info: dict[str, Any] | None = None,
    auth: Authenticator | None = None,
    codec: AesGcmCodec | None = None,
    hosts: Iterable[str] | None = None,
) -> web.Application:
    """The aiohttp application of the codec server (routes in the module docstring).

    Args:
        storage: resolves references (by driver name) and stores on ``/encode``; usually
            :func:`workers.payloads.converter.build_external_storage` of the worker's settings.
        allowed_origins: browser origins allowed (``"*"`` for any); default
            :func:`default_allowed_origins`.
        info: extra fields for ``GET /healthz`` (shown to authenticated callers only).
        auth: who may decode and encode (:mod:`workers.console.auth`: the console's token,
            OIDC or a trusted proxy); None serves anyone who passes the Origin check (tests of
            the storage alone).
        codec: decrypts on ``/decode`` and encrypts on ``/encode`` (``AGENT_ENCRYPTION_KEYS``).
        hosts: the ``Host`` names answered (any other: 421); default the loopback names
            (:data:`workers.console.auth.LOOPBACK_NAMES`); see
            :func:`workers.console.auth.allowed_hosts`.
    """
    origins = list(default_allowed_origins() if allowed_origins is None else allowed_origins)
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_host_guard, _origin_guard])
    app[_HOSTS_KEY] = frozenset(h.lower() for h in (LOOPBACK_NAMES if hosts is None else hosts))
    app[_STORAGE_KEY] = storage
    app[_ORIGINS_KEY] = frozenset(o.rstrip("/") for o in origins)
    app[_INFO_KEY] = dict(info or {})
    if auth is not None:
        app[_AUTH_KEY] = auth
    if codec is not None:
        app[_CODEC_KEY] = codec
    app.router.add_get("/healthz", _health)
    # The protocol asks servers to look only at the last path segment, so the endpoint can be
    # mounted at any depth (e.g. http://host:8234/default/decode).
    app.router.add_route("*", "/{path:.*}", _dispatch)
    return app


async def _dispatch(request: web.Request) -> web.StreamResponse:
    op = request.path.rstrip("/").rsplit("/", 1)[-1]
    if op not in ("decode", "encode"):
        raise web.HTTPNotFound(
            text=json.dumps({"error": "use POST .../decode or POST .../encode"}),
            content_type="application/json",
        )
    if request.method == "OPTIONS":
        return await _preflight(request)
    if request.method != "POST":
        raise web.HTTPMethodNotAllowed(request.method, ["POST", "OPTIONS"])
    return await (_decode if op == "decode" else _encode)(request)


# --------------------------------------------------------------------------- running


class CodecServer:
    """A running codec server (see :func:`start_codec_server`); ``url`` is its base URL."""

    def __init__(self, runner: web.AppRunner, url: str) -> None:
        self._runner = runner
        self.url = url

    async def stop(self) -> None:
        """Stop serving and release the port."""
        await self._runner.cleanup()

    async def __aenter__(self) -> CodecServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _settings_info(settings: Settings) -> dict[str, Any]:
    info: dict[str, Any] = {
        "store": settings.payload_store,
        "payload_dir": str(settings.payload_path),
        "threshold_bytes": settings.payload_threshold_bytes,
    }
    if settings.payload_store == "s3":
        info["s3_bucket"] = settings.s3_bucket
        info["s3_prefix"] = settings.s3_prefix
    return info


async def start_codec_server(
    settings: Settings | None = None,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    allowed_origins: Iterable[str] | None = None,
    storage: ExternalStorage | None = None,
    auth: Authenticator | None = None,
) -> CodecServer:
    """Start the codec server in the running event loop.

    Args:
        settings: default :func:`workers.config.load_settings`.
        host: address to bind (keep loopback: the server hands out payload contents); the server
            answers for ``host``, the loopback names and ``AGENT_CONSOLE_ALLOWED_HOSTS`` only.
        port: TCP port; default ``settings.codec_port`` (8234); 0 = any free port.
        allowed_origins: browser origins allowed; default :func:`default_allowed_origins`.
        storage: default ``build_external_storage(settings)``.
        auth: default: as the settings say (the console's token by default).

    Returns:
        The server; ``await server.stop()`` (or ``async with``) to stop it.

    Raises:
        workers.payloads.converter.PayloadStoreConfigError: the configured store cannot be built.
        OSError: the port is taken.
    """
    settings = settings or load_settings()
    storage = storage or build_external_storage(settings)
    app = build_codec_app(
        storage,
        allowed_origins=allowed_origins,
        info=_settings_info(settings),
        auth=auth or authenticator_from_settings(settings, host),
        codec=codec_from_setting(settings.encryption_keys),
        hosts=allowed_hosts(host, split_list(settings.console_allowed_hosts)),
    )
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, settings.codec_port if port is None else port)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1] if runner.addresses else port
    shown = f"[{host}]" if ":" in host else host
    return CodecServer(runner, f"http://{shown}:{bound}")


def _serve(
    host: str = typer.Option("127.0.0.1", help="address to bind"),
    port: int | None = typer.Option(None, help="port (default AGENT_CODEC_PORT, 8234)"),
    allow_origin: list[str] | None = typer.Option(  # noqa: B008 - typer's idiom
        None,
        "--allow-origin",
        help="browser origin allowed (repeatable; default: the Web UI of temporal-dev.yml)",
    ),
) -> None:
    """Codec server for the Temporal Web UI: resolves external payload references."""
    settings = load_settings()
    port = settings.codec_port if port is None else port
    logging.basicConfig(level=settings.log_level.upper(), format="%(levelname)s %(message)s")
    try:
        storage = build_external_storage(settings)
        auth = authenticator_from_settings(settings, host)
        codec = codec_from_setting(settings.encryption_keys)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        raise typer.Exit(2) from None
    origins = allow_origin or default_allowed_origins()
    app = build_codec_app(
        storage,
        allowed_origins=origins,
        info=_settings_info(settings),
        auth=auth,
        codec=codec,
        hosts=allowed_hosts(host, split_list(settings.console_allowed_hosts)),
    )
    banner = (
        f"codec_server_started url=http://{host}:{port} store={settings.payload_store} "
        f"payload_dir={settings.payload_path} allowed_origins={','.join(origins)}"
    )

    def _started(_msg: str) -> None:  # called by run_app once the port is bound
        print(banner, file=sys.stderr, flush=True)

    try:
        web.run_app(app, host=host, port=port, print=_started, access_log=None)
    except OSError as e:
        print(f"error: cannot listen on {host}:{port}: {e}", file=sys.stderr)
        raise typer.Exit(1) from None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m workers.payloads.codec_server``: serve until Ctrl-C / SIGTERM; the exit status.

    Options (parsed by typer; ``--help`` lists them): ``--host``, ``--port``,
    ``--allow-origin`` (repeatable). A usage error returns 2.
    """
    return run_command(_serve, argv, "python -m workers.payloads.codec_server")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
