"""Tools finished later (issue #38 part 3): an outside service calls ``POST /callbacks/{token}``.

The outside service is a real HTTP server (aiohttp) on a free port: the tool hands it the call's
callback URL and returns ``raise_complete_async()``; the service calls ``agentctl serve`` back
later, with no console login.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from temporalio.client import Client

from activities.callbacks import CallbackClaims, sign_token
from tests.support.console import TOKEN
from tests.support.harness import Harness
from workers.console.auth import Authenticator
from workers.console.serve import start_server
from workers.testing.scripted_model import ScriptedModel, text, tool_call

KEY = bytes(range(32))
KEY_B64 = base64.b64encode(KEY).decode()


class OutsideService:
    """Takes jobs (``POST /jobs``) and calls each one's callback back after ``delay`` seconds.

    ``body(job)`` is what it sends; it sends ``times`` times and keeps every answer
    (``answers``: status and JSON).
    """

    def __init__(self, delay: float = 0.5, times: int = 1, body: Any = None) -> None:
        self.delay, self.times = delay, times
        self.body = body or (lambda job: {"result": f"done: {job}"})
        self.jobs: list[dict[str, Any]] = []
        self.answers: list[tuple[int, dict[str, Any]]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def _job(self, request: web.Request) -> web.Response:
        job = await request.json()
        self.jobs.append(job)
        self._tasks.append(asyncio.ensure_future(self._call_back(job)))
        return web.json_response({"accepted": True}, status=202)

    async def _call_back(self, job: dict[str, Any]) -> None:
        await asyncio.sleep(self.delay)
        async with aiohttp.ClientSession() as http:
            for _ in range(self.times):
                r = await http.post(job["callback"], json=self.body(job["job"]))
                self.answers.append((r.status, await r.json()))

    async def __aenter__(self) -> OutsideService:
        app = web.Application()
        app.router.add_post("/jobs", self._job)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/jobs"
        return self

    async def __aexit__(self, *exc: object) -> None:
        for t in self._tasks:
            t.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    async def answered(self, n: int, timeout: float = 30) -> None:
        for _ in range(int(timeout / 0.05)):
            if len(self.answers) >= n:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{len(self.answers)} callbacks answered, wanted {n}")


@asynccontextmanager
async def _serve(client: Client, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    monkeypatch.setenv("AGENT_CALLBACK_KEY", KEY_B64)
    runner, url = await start_server(
        client, "127.0.0.1", 0, lambda r: r, None, Authenticator(token=TOKEN)
    )
    try:
        yield url
    finally:
        await runner.cleanup()


def _agents(tool: str) -> dict[str, dict[str, Any]]:
    return {"default": {"tools": ["calculator", tool]}}


def _harness(client: Client, tmp_path: Path, model: ScriptedModel, url: str, tool: str) -> Harness:
    return Harness(
        client,
        tmp_path,
        model,
        agents=_agents(tool),
        settings={"callback_key": KEY_B64, "callback_url": url},
    )


async def test_a_callback_tool_completes_via_post_and_a_reused_token_is_refused(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    async with _serve(client, monkeypatch) as url, OutsideService(delay=1.0, times=2) as svc:
        model = ScriptedModel(
            [tool_call("outside_job", {"service": svc.url, "job": "render"}), text("rendered")]
        )
        async with _harness(client, tmp_path, model, url, "outside_job") as h:
            result = await asyncio.wait_for(h.run("render it"), 60)
            await svc.answered(2)
            # the same token on another serve (no memory of its use): Temporal refuses it
            monkeypatch.setenv("AGENT_CALLBACK_KEY", KEY_B64)
            runner2, url2 = await start_server(
                client, "127.0.0.1", 0, lambda r: r, None, Authenticator(token=TOKEN)
            )
            try:
                token = svc.jobs[0]["callback"].rsplit("/", 1)[1]
                async with aiohttp.ClientSession() as http:
                    r = await http.post(f"{url2}/callbacks/{token}", json={"result": "again"})
                    again = (r.status, await r.json())
            finally:
                await runner2.cleanup()
    assert result.status == "completed" and result.output == "rendered"
    call = result.tool_calls[0]
    assert call.name == "outside_job" and call.status == "ok"
    assert call.duration_ms >= 900  # from the URL's issue to the callback
    told = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert told == ["done: render"]
    assert svc.jobs[0]["callback"].startswith(f"{url}/callbacks/")
    assert svc.answers[0][0] == 200 and svc.answers[0][1]["tool_call_id"] == call.id
    assert svc.answers[1][0] == 409 and "already used" in svc.answers[1][1]["error"]
    assert again[0] == 410 and "no longer waits" in again[1]["error"]


async def test_an_error_callback_is_the_tools_error(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    async with (
        _serve(client, monkeypatch) as url,
        OutsideService(delay=0.2, body=lambda job: {"error": f"no printer for {job}"}) as svc,
    ):
        model = ScriptedModel(
            [tool_call("outside_job", {"service": svc.url, "job": "print"}), text("sorry")]
        )
        async with _harness(client, tmp_path, model, url, "outside_job") as h:
            result = await asyncio.wait_for(h.run("print it"), 60)
    assert result.tool_calls[0].status == "error"
    told = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert told == ["Error: no printer for print"]


async def test_a_callback_past_the_activity_timeout_is_refused_and_the_model_told(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    async with _serve(client, monkeypatch) as url, OutsideService(delay=4.0) as svc:
        model = ScriptedModel(
            [tool_call("outside_job_short", {"service": svc.url, "job": "slow"}), text("late")]
        )
        async with _harness(client, tmp_path, model, url, "outside_job_short") as h:
            result = await asyncio.wait_for(h.run("go"), 60)
            await svc.answered(1)
    assert result.tool_calls[0].status == "timed_out"
    told = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"][0]
    assert "did not finish within its time limit (2 s)" in told
    status, body = svc.answers[0]
    assert status == 410 and "expired" in body["error"]


async def test_bad_bodies_are_refused_without_using_the_token(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    bodies = iter([{"result": 1, "error": "x"}, {}, {"error": 5}, {"result": {"pages": 3}}])
    async with (
        _serve(client, monkeypatch) as url,
        OutsideService(delay=0.2, times=4, body=lambda job: next(bodies)) as svc,
    ):
        model = ScriptedModel(
            [tool_call("outside_job", {"service": svc.url, "job": "count"}), text("3 pages")]
        )
        async with _harness(client, tmp_path, model, url, "outside_job") as h:
            result = await asyncio.wait_for(h.run("count"), 60)
    assert [s for s, _ in svc.answers] == [400, 400, 400, 200]
    told = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert told == [json.dumps({"pages": 3})]
    assert result.status == "completed"


async def test_forged_expired_and_malformed_tokens_are_refused(
    client: Client, monkeypatch: pytest.MonkeyPatch
):
    claims = CallbackClaims(
        task_token=base64.b64encode(b"not-a-real-task-token").decode(),
        run_id="run-x",
        call_id="call_1",
        name="outside_job",
        expires_at=time.time() + 600,
    )
    good = sign_token(KEY, claims)
    payload, _ = good.split(".")
    other_key = sign_token(bytes(32), claims)
    expired = sign_token(KEY, claims.model_copy(update={"expires_at": time.time() - 1}))
    tampered = sign_token(KEY, claims.model_copy(update={"call_id": "call_2"})).split(".")[1]
    async with _serve(client, monkeypatch) as url, aiohttp.ClientSession() as http:

        async def post(token: str, body: Any = None) -> tuple[int, str]:
            r = await http.post(f"{url}/callbacks/{token}", json=body or {"result": "x"})
            return r.status, (await r.json())["error"]

        assert await post(other_key) == (
            403,
            "forged callback token (its signature does not match)",
        )
        assert (await post(f"{payload}.{tampered}"))[0] == 403
        assert (await post(expired))[0] == 410
        assert (await post("nodot"))[0] == 400
        assert (await post("a.b.c"))[0] == 400
        r = await http.post(f"{url}/callbacks/{'x' * 9000}", json={"result": "x"})
        assert r.status in (400, 414)  # past MAX_TOKEN_CHARS, or aiohttp's own line limit
        assert (await post("x" * 4100 + ".y"))[0] == 400
        # a well-signed token for an attempt Temporal does not know: refused by Temporal
        status, why = await post(good)
        assert status in (400, 410), why
        r = await http.post(
            f"{url}/callbacks/{good}",
            data=b"x" * (300 * 1024),
            headers={"Content-Type": "application/json"},
        )
        assert r.status == 413
