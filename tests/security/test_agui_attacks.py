"""AG-UI (``POST /agui``) attacks: tenants never share a thread, the principal is the authenticated one.

The Chromium attack from another origin is in tests/integration/test_agui.py (it shares the
browser conversation's setup).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from temporalio.client import Client

from tests.support.agui import sse as _sse
from tests.support.harness import Harness
from workers import client as rc
from workers.console import auth as ca
from workers.console.agui import thread_workflow_id
from workers.console.serve import build_app
from workers.testing.scripted_model import ScriptedModel, text


async def test_tenants_never_share_a_thread_and_the_principal_is_the_authenticated_one(
    client: Client, tmp_path: Path
):
    """Proxy identities: the same threadId names two runs for two tenants; a body cannot pick."""
    proxy = ca.Authenticator(mode="proxy", trusted_proxies=frozenset({"127.0.0.1"}))
    model = ScriptedModel([text("hello acme"), text("hello globex"), text("hello again")])
    async with Harness(client, tmp_path, model) as h:
        gate = ca.Gate.build(proxy, "127.0.0.1")
        app = build_app(client, lambda r: r, h.task_queue, gate=gate)
        runner = web.AppRunner(app, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        bob = {"X-Forwarded-User": "bob", "X-Forwarded-Groups": "tenant:acme"}
        eve = {"X-Forwarded-User": "eve", "X-Forwarded-Groups": "tenant:globex"}
        thread = str(uuid.uuid4())

        def body(text_: str, **more: Any) -> dict[str, Any]:
            return {
                "threadId": thread,
                "runId": str(uuid.uuid4()),
                "messages": [{"id": str(uuid.uuid4()), "role": "user", "content": text_}],
                **more,
            }

        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{url}/agui", json=body("hi"), headers=bob) as r:
                    assert r.status == 200
                    evs = _sse(await r.text())
                assert evs[-1]["type"] == "RUN_FINISHED"
                # eve, same thread id: her own run, not bob's; naming bob's tenant is refused
                async with http.post(f"{url}/agui", json=body("hi"), headers=eve) as r:
                    assert r.status == 200
                    await r.text()
                forged = body("hi", forwardedProps={"tenant_id": "acme"})
                async with http.post(f"{url}/agui", json=forged, headers=eve) as r:
                    assert r.status == 403
                # a principal in the body counts for nothing
                sneaky = body("hi", forwardedProps={"principal_id": "bob"})
                sneaky["messages"][0]["name"] = "bob"
                async with http.post(f"{url}/agui", json=sneaky, headers=eve) as r:
                    assert r.status == 200
                    await r.text()
                # a bad thread id, a new thread without a user message, a bad approval answer
                async with http.post(
                    f"{url}/agui", json={**body("x"), "threadId": "../x"}, headers=bob
                ) as r:
                    assert r.status == 400
                async with http.post(
                    f"{url}/agui",
                    json={**body("x"), "threadId": "new", "messages": []},
                    headers=bob,
                ) as r:
                    assert r.status == 400
                bad = body("x")
                bad["messages"] = [
                    {"id": "t", "role": "tool", "toolCallId": "approve-call_9", "content": "yes"}
                ]
                async with http.post(f"{url}/agui", json=bad, headers=bob) as r:
                    assert r.status == 400
                    assert "approved" in (await r.json())["error"]
            acme = thread_workflow_id("acme", thread)
            globex = thread_workflow_id("globex", thread)
            assert acme != globex
            a, g = await rc.state(client, acme), await rc.state(client, globex)
            assert (a.tenant_id, a.principal_id) == ("acme", "bob")
            assert (g.tenant_id, g.principal_id) == ("globex", "eve")
            assert [
                m["content"] for m in await rc.transcript(client, acme) if m["role"] == "user"
            ] == ["hi"]
            assert [
                m["content"] for m in await rc.transcript(client, globex) if m["role"] == "user"
            ] == ["hi", "hi"]
        finally:
            await runner.cleanup()
            for wf in (thread_workflow_id("acme", thread), thread_workflow_id("globex", thread)):
                await client.get_workflow_handle(wf).terminate()


def test_thread_ids_name_one_tenant_and_thread():
    assert thread_workflow_id("acme", "t-1") == "agui.acme.t-1"
    # a tenant with a dot cannot reach another tenant's thread or a child run's id
    assert thread_workflow_id("a.b", "c") != thread_workflow_id("a", "b.c".replace(".", "_"))
    assert thread_workflow_id("a.b", "c") == "agui.a%2Eb.c"
    assert thread_workflow_id("é", "c") == "agui.%C3%A9.c"
    for bad in ("", "a.b", "../x", "x" * 129, "a b"):
        with pytest.raises(ValueError):
            thread_workflow_id("acme", bad)
