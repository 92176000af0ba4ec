"""What the AG-UI tests share: the console's app on a free port, the token, reading AG-UI SSE."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from temporalio.client import Client

from tests.support.harness import Harness
from workers.console import auth as ca
from workers.console.serve import build_app

TOKEN = "agui-test-token"
"""The console token the AG-UI tests serve with (``Authenticator(token=TOKEN)``)."""


async def serve(
    client: Client, h: Harness, page: str | None = None, auth: ca.Authenticator | None = None
) -> tuple[web.AppRunner, str]:
    """The console's app (as ``agentctl serve`` builds it) on a free port; ``page`` at ``/t``.

    ``auth`` None: the token :data:`TOKEN`. Returns the runner (``cleanup()`` stops it) and the URL.
    """
    gate = ca.Gate.build(auth or ca.Authenticator(token=TOKEN), "127.0.0.1")
    app = build_app(client, lambda r: f"http://ui/{r}", h.task_queue, gate=gate)
    if page is not None:
        body = page

        async def _page(_r: web.Request) -> web.Response:
            return web.Response(text=body, content_type="text/html")

        app.router.add_get("/t", _page)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def sse(raw: str) -> list[dict[str, Any]]:
    """The AG-UI events of a response body (``data: <JSON>`` blocks)."""
    return [json.loads(x[6:]) for x in raw.split("\n\n") if x.startswith("data: ")]


def types(events: list[dict[str, Any]]) -> list[str]:
    """The ``type`` of each event."""
    return [e["type"] for e in events]
