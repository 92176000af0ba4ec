"""Client tools and tools finished later under attack (issue #38): another tenant's principal
answering a client tool, forged and replayed callback tokens (docs/security.md, docs/tools.md)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from temporalio.client import Client

from activities.callbacks import sign_token, verify_token
from tests.support.harness import Harness, until_state
from workers.console.auth import Authenticator
from workers.console.serve import start_server
from workers.testing.scripted_model import ScriptedModel, text, tool_call

PICK = {"name": "pick_file", "client": True, "description": "Pick a file.", "parameters": {}}
KEY = bytes(range(32))


async def test_another_tenants_principal_cannot_answer_a_client_tool(
    client: Client, tmp_path: Path
):
    agents = {"default": {"tools": [PICK], "policy": {"approvers": ["ann"]}}}
    model = ScriptedModel([tool_call("pick_file", {}), text("done")])
    proxy = Authenticator(mode="proxy", trusted_proxies=frozenset({"127.0.0.1"}))
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("pick", principal_id="ann", tenant_id="default")
        st = await until_state(handle, lambda s: s.pending_client_tools)
        cid = st.pending_client_tools[0].tool_call_id
        runner, url = await start_server(client, "127.0.0.1", 0, lambda r: r, h.task_queue, proxy)
        who = {
            "mallory": {"X-Forwarded-User": "mallory", "X-Forwarded-Groups": "tenant:acme"},
            "carol": {"X-Forwarded-User": "carol", "X-Forwarded-Groups": "tenant:default"},
            "ann": {"X-Forwarded-User": "ann", "X-Forwarded-Groups": "tenant:default"},
        }
        path = f"{url}/runs/{handle.id}/tool-result"
        body = {"tool_call_id": cid, "content": "/etc/shadow"}
        try:
            async with aiohttp.ClientSession() as http:
                # another tenant's principal: the run does not exist for them
                r = await http.post(path, json=body, headers=who["mallory"])
                assert r.status == 404
                # in the tenant, but neither the run's principal nor an approver
                r = await http.post(path, json=body, headers=who["carol"])
                assert r.status == 409 and "carol" in (await r.json())["error"]
                # a body naming another principal is no credential
                r = await http.post(
                    path, json={**body, "principal_id": "ann"}, headers=who["carol"]
                )
                assert r.status == 403
                # no credential at all
                r = await http.post(path, json=body)
                assert r.status == 401
                st = await until_state(handle, lambda s: True)
                assert [p.tool_call_id for p in st.pending_client_tools] == [cid]
                r = await http.post(
                    path, json={"tool_call_id": cid, "content": "a.txt"}, headers=who["ann"]
                )
                assert r.status == 200, await r.text()
            result = await asyncio.wait_for(handle.result(), 30)
        finally:
            await runner.cleanup()
    assert result.status == "completed" and result.tool_calls[0].status == "ok"
    told = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert told == ["a.txt"]


class _Keeper:
    """An outside service that keeps the callback URL it is given and never calls back."""

    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []
        self.url = ""
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()

        async def job(request: web.Request) -> web.Response:
            self.jobs.append(await request.json())
            return web.json_response({}, status=202)

        app.router.add_post("/jobs", job)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}/jobs"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


async def test_forged_callback_tokens_change_nothing_and_the_real_one_works(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    key_b64 = base64.b64encode(KEY).decode()
    monkeypatch.setenv("AGENT_CALLBACK_KEY", key_b64)
    keeper = _Keeper()
    await keeper.start()
    runner, url = await start_server(client, "127.0.0.1", 0, lambda r: r, None)
    model = ScriptedModel(
        [tool_call("outside_job", {"service": keeper.url, "job": "pay"}), text("paid")]
    )
    agents = {"default": {"tools": ["outside_job"]}}
    settings = {"callback_key": key_b64, "callback_url": url}
    try:
        async with Harness(client, tmp_path, model, agents=agents, settings=settings) as h:
            handle = await h.start("pay")
            for _ in range(400):
                if keeper.jobs:
                    break
                await asyncio.sleep(0.05)
            real = keeper.jobs[0]["callback"].rsplit("/", 1)[1]
            claims = verify_token(KEY, real, 0)
            payload, mac = real.split(".")
            # the same claims under another key; claims edited under the real MAC; a MAC alone;
            # the real token's claims for another call, re-encoded without the key
            edited = claims.model_copy(update={"call_id": "call_other"}).model_dump(mode="json")
            forged = [
                sign_token(b"k" * 32, claims),
                f"{_b64(json.dumps(edited).encode())}.{mac}",
                f"{payload}.{_b64(b'x' * 32)}",
                f"{payload}.",
            ]
            async with aiohttp.ClientSession() as http:
                for token in forged:
                    r = await http.post(f"{url}/callbacks/{token}", json={"result": "stolen"})
                    assert r.status in (400, 403), (token, r.status)
                st = await until_state(handle, lambda s: True)
                assert st.tool_calls[0].status == "running"  # still waiting for the real one
                r = await http.post(f"{url}/callbacks/{real}", json={"result": "receipt 7"})
                assert r.status == 200
                r = await http.post(f"{url}/callbacks/{real}", json={"result": "again"})
                assert r.status == 409
            result = await asyncio.wait_for(handle.result(), 30)
    finally:
        await runner.cleanup()
        assert keeper.runner is not None
        await keeper.runner.cleanup()
    assert result.status == "completed"
    told = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert told == ["receipt 7"]
