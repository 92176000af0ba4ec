"""A worker's live channel over HTTP: ``GET /live/{run_id}`` as Server-Sent Events (issue #38).

Serves :data:`activities.live.BROKER` (the runs this process executes): each SSE ``data:`` line is
one JSON item, a step item (with its stream ``offset``) or a live delta (``"live": true``); a
comment line every :data:`KEEPALIVE_SECONDS` keeps an idle connection open. ``?from=N``: step
items from offset N (the newest step's live deltas always come first-hand).

Authentication: ``Authorization: Bearer <token>`` where the token is
:func:`activities.live.sign_token` of the run id with the shared secret (``AGENT_LIVE_SECRET`` or
``<state_dir>/live-secret``); anything else gets 401 and no item. Only GET is answered.

The worker publishes where it is reached in its Temporal identity (:func:`identity_with`), so a
reader (``workers.live_reader``) finds it from the task queue's pollers and the history's
``identity`` fields, without any call into the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import socket
from pathlib import Path

import structlog
from aiohttp import web

from activities.live import BROKER, verify_token
from activities.private_files import private_file
from workers.config import Settings
from workers.http_site import http_url, listen, open_sse

__all__ = [
    "IDENTITY_MARK",
    "KEEPALIVE_SECONDS",
    "LiveServer",
    "identity_with",
    "live_secret",
    "live_url_of",
]

log = structlog.get_logger("workers.live_server")

KEEPALIVE_SECONDS = 15.0
"""Idle time after which the live stream sends a comment line."""
IDENTITY_MARK = " live="
"""What precedes the live channel's URL in a worker's identity."""
SECRET_FILE = "live-secret"


def live_secret(settings: Settings) -> bytes:
    """The live channel's signing secret: ``AGENT_LIVE_SECRET``, else ``<state_dir>/live-secret``.

    The file is created (32 random bytes, URL-safe, mode 0600) on first use.

    Raises:
        OSError: the state folder cannot be written.
    """
    if settings.live_secret:
        return settings.live_secret.encode()
    path = Path(settings.state_dir).expanduser() / SECRET_FILE
    if not path.exists():  # made aside, then linked: a console and a worker starting together
        tmp = private_file(path.with_name(f".{SECRET_FILE}.{os.getpid()}.{secrets.token_hex(4)}"))
        try:
            tmp.write_text(secrets.token_urlsafe(32))
            with contextlib.suppress(FileExistsError):  # the other one won: its secret it is
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return private_file(path).read_text().strip().encode()


def identity_with(url: str) -> str:
    """The worker identity ``<pid>@<host> live=<url>`` (Temporal's default plus the URL)."""
    return f"{os.getpid()}@{socket.gethostname()}{IDENTITY_MARK}{url}"


def live_url_of(identity: str) -> str | None:
    """The live channel's URL in a worker ``identity`` (:func:`identity_with`), else None."""
    _, mark, url = identity.partition(IDENTITY_MARK)
    url = url.split()[0] if url.strip() else ""
    return url if mark and url.startswith(("http://", "https://")) else None


class LiveServer:
    """The live channel's HTTP server of one worker process.

    Args:
        address: ``host:port`` to listen on (``AGENT_LIVE_ADDRESS``; port 0: a free one).
        secret: the token secret (:func:`live_secret`).
        advertise: ``host:port`` or URL others reach it at (None: the bound address; the
            machine's name when bound to every interface).
    """

    def __init__(self, address: str, secret: bytes, advertise: str | None = None) -> None:
        self.address = address
        self._secret = secret
        self._advertise = advertise
        self.url = ""
        self._runner: web.AppRunner | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> LiveServer | None:
        """The server ``AGENT_LIVE_ADDRESS`` asks for (None when it is ``off`` or empty)."""
        if settings.live_address.strip().lower() in ("", "off"):
            return None
        return cls(settings.live_address, live_secret(settings), settings.live_advertise_address)

    async def start(self) -> str:
        """Listen and take live items from now on; returns the advertised URL.

        Raises:
            OSError: the address is in use or cannot be bound.
        """
        app = web.Application()
        app.router.add_get("/live/{run_id}", self._live)
        self._runner, host, bound = await listen(app, self.address)
        if self._advertise:
            adv = self._advertise
            self.url = adv if adv.startswith(("http://", "https://")) else f"http://{adv}"
        else:
            shown = host if host not in (None, "0.0.0.0", "::") else socket.getfqdn()
            self.url = http_url(shown, bound)
        BROKER.bind(asyncio.get_running_loop())
        log.info("live_serving", url=self.url)
        return self.url

    async def stop(self) -> None:
        """Stop listening and taking items."""
        BROKER.bind(None)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _live(self, request: web.Request) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        auth = request.headers.get("Authorization", "")
        token = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
        if not token or not verify_token(self._secret, token, run_id):
            raise web.HTTPUnauthorized(
                text=json.dumps({"error": "a live token for this run is required"}),
                content_type="application/json",
            )
        raw = request.query.get("from", "0")
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
            raise web.HTTPBadRequest(
                text=json.dumps({"error": "from must be a non-negative integer"}),
                content_type="application/json",
            )
        resp = await open_sse(request)
        items = BROKER.subscribe(run_id, int(raw))
        nxt: asyncio.Future[dict[str, object]] | None = None
        try:
            await resp.write(b": live\n\n")
            while True:
                nxt = nxt or asyncio.ensure_future(anext(items))
                done, _ = await asyncio.wait({nxt}, timeout=KEEPALIVE_SECONDS)
                if not done:
                    await resp.write(b": keepalive\n\n")
                    continue
                try:
                    item = nxt.result()
                except StopAsyncIteration:
                    break
                nxt = None
                await resp.write(f"data: {json.dumps(item)}\n\n".encode())
        except ConnectionResetError:
            pass  # the reader went away
        finally:
            if nxt is not None and not nxt.done():
                nxt.cancel()
                with contextlib.suppress(BaseException):
                    await nxt
            await items.aclose()
        return resp
