"""What the run console's tests share: the token they serve with, a run held for approval, the
console and another site's page on free ports, an identity provider's keys."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from temporalio.client import Client

from workers.console.auth import Authenticator
from workers.console.serve import start_server
from workers.testing.scripted_model import ScriptedModel, text, tool_call

TOKEN = "security-test-token"
"""The console token the security tests serve with (``Authenticator(token=TOKEN)``)."""


def pending_write(h_model_answer: str = "done") -> ScriptedModel:
    """A model that asks for ``write_file owned.txt`` (held for approval), then answers."""
    return ScriptedModel(
        [tool_call("write_file", {"path": "owned.txt", "content": "x"}), text(h_model_answer)]
    )


async def jwks_server() -> tuple[web.AppRunner, str, Any]:
    """An identity provider's JWKS endpoint on a free port: ``(runner, its URL, the RSA key)``.

    It serves the key's public half as ``kid`` ``k1`` (RS256); clean up with ``runner.cleanup()``.
    """
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    app = web.Application()

    async def _keys(_r: web.Request) -> web.Response:
        return web.json_response({"keys": [{**jwk, "kid": "k1", "alg": "RS256"}]})

    app.router.add_get("/jwks", _keys)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/jwks", key


async def serve_console(
    client: Client, task_queue: str | None, auth: Authenticator
) -> tuple[web.AppRunner, str]:
    """The run console (:func:`start_server`) on a free port of 127.0.0.1, its Web UI links
    ``http://ui/<run_id>``: ``(runner, base URL)``; clean up with ``runner.cleanup()``."""
    return await start_server(client, "127.0.0.1", 0, lambda r: f"http://ui/{r}", task_queue, auth)


async def serve_page(html: str) -> tuple[web.AppRunner, str]:
    """``html`` served at ``/`` on another port of 127.0.0.1 (same site as the console, another
    origin): ``(runner, the page's URL)``; clean up with ``runner.cleanup()``."""
    app = web.Application()

    async def _page(_r: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html")

    app.router.add_get("/", _page)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/"
