"""The run console and the codec server after the 2026-11-27 probe (docs/security.md): framing
(clickjacking) in real Chromium, ``*`` tenants from a proxy header or an OIDC claim, a 404 that
says nothing about other tenants' runs, bad input answered 400, and the codec server's
``/healthz`` behind the Host allow-list."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from tests.support.console import TOKEN, jwks_server, pending_write, serve_page
from tests.support.harness import CHROMIUM, CHROMIUM_ARGS, Harness, until_state
from tests.support.payloads import settings_in
from workers.console.auth import Authenticator
from workers.console.serve import start_server
from workers.payloads.codec_server import start_codec_server

DECOY = """<!doctype html><html><body style="margin:0">
<button id="decoy" onclick="document.title='decoy'" style="position:absolute;left:0;top:0;
 width:100%%;height:100%%;font-size:40px">Click to claim your prize</button>
<iframe id="f" src="%(console)s/#run=%(run)s" style="position:absolute;left:0;top:0;width:1200px;
 height:900px;opacity:0;z-index:2;border:0"></iframe>
</body></html>"""


def _assert_no_framing(headers: Any, what: str) -> None:
    assert headers.get("X-Frame-Options") == "DENY", what
    assert "frame-ancestors 'none'" in headers.get("Content-Security-Policy", ""), what


async def _start_in(h: Harness, tenant: str) -> tuple[Any, str]:
    """A run of ``alice`` in ``tenant`` with a call held for approval: (handle, call id)."""
    return await h.start_held("write it", tenant_id=tenant, principal_id="alice")


async def test_a_page_on_another_port_cannot_frame_the_console_over_a_decoy(
    client: Client, tmp_path: Path
):
    from playwright.async_api import async_playwright

    async with Harness(client, tmp_path, pending_write()) as h:
        handle, call_id = await _start_in(h, "default")
        runner, url = await start_server(
            client, "127.0.0.1", 0, lambda r: r, h.task_queue, Authenticator(token=TOKEN)
        )
        evil_runner, evil_url = await serve_page(DECOY % {"console": url, "run": handle.id})
        try:
            async with aiohttp.ClientSession() as http:
                for path, headers in (
                    ("/", {"Authorization": f"Bearer {TOKEN}"}),
                    ("/static/console.js", {}),
                    ("/api/runs", {}),  # a refusal (401) too
                    (f"/runs/{handle.id}/events", {"Authorization": f"Bearer {TOKEN}"}),
                ):
                    async with http.get(url + path, headers=headers) as r:
                        _assert_no_framing(r.headers, path)
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = await browser.new_page(viewport={"width": 1200, "height": 900})
                await page.goto(f"{url}/?token={TOKEN}")  # signed in: the browser holds the cookie
                # where the Approve button is when the console is opened for this run
                await page.goto(f"{url}/#run={handle.id}")
                approve = page.locator("button.approve").first
                await approve.wait_for(timeout=15_000)
                box = await approve.bounding_box()
                assert box is not None
                await page.goto(evil_url)
                await asyncio.sleep(3.0)  # the framed console had loaded its run by now
                framed = [f for f in page.frames if f != page.main_frame]
                assert framed, "the decoy page has its iframe"
                for f in framed:
                    assert not await f.locator("button.approve").count(), f.url
                    assert not await f.locator("#principal").count(), f.url
                # the person clicks the decoy, where the framed Approve button would be
                await page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                await asyncio.sleep(1.5)
                await browser.close()
            st = await until_state(handle, lambda s: True)
            assert [p.tool_call_id for p in st.pending_approvals] == [call_id]
            assert st.status == "awaiting_approval" and not st.decisions
        finally:
            await evil_runner.cleanup()
            await runner.cleanup()
            await handle.terminate("test over")


def _jwt(key: Any, **claims: Any) -> str:
    body = {"sub": "eve", "iss": "https://idp", "aud": "console", "exp": time.time() + 60}
    return jwt.encode({**body, **claims}, key, algorithm="RS256", headers={"kid": "k1"})


async def test_a_star_tenant_from_a_proxy_group_or_an_oidc_claim_grants_nothing(
    client: Client, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.WARNING, logger="workers.console.auth")
    jr, jwks_url, key = await jwks_server()
    proxy = Authenticator(mode="proxy", trusted_proxies=frozenset({"127.0.0.1"}))
    oidc = Authenticator(mode="oidc", jwks_url=jwks_url, issuer="https://idp", audience="console")
    async with Harness(client, tmp_path, pending_write()) as h:
        acme, _ = await _start_in(h, "acme")
        runner, purl = await start_server(client, "127.0.0.1", 0, lambda r: r, h.task_queue, proxy)
        runner2, ourl = await start_server(client, "127.0.0.1", 0, lambda r: r, h.task_queue, oidc)
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        who = {
            (purl, "only *"): {"X-Forwarded-User": "eve", "X-Forwarded-Groups": "tenant:*"},
            (purl, "* and globex"): {
                "X-Forwarded-User": "eve",
                "X-Forwarded-Groups": "tenant:*,tenant:globex",
            },
            (ourl, "tenants [*]"): {"Authorization": f"Bearer {_jwt(key, tenants=['*'])}"},
            (ourl, "tenant_id *"): {"Authorization": f"Bearer {_jwt(key, tenant_id='*')}"},
            (ourl, "tenants [*, globex]"): {
                "Authorization": f"Bearer {_jwt(key, tenants=['*', 'globex'])}"
            },
        }
        try:
            async with aiohttp.ClientSession() as http:
                for (url, label), headers in who.items():
                    me = await (await http.get(url + "/api/session", headers=headers)).json()
                    want = ["globex"] if "globex" in label else ["default"]
                    assert me["tenants"] == want, label
                    r = await http.get(f"{url}/runs/{acme.id}", headers=headers)
                    assert r.status == 404, label
                    listed = await (await http.get(url + "/api/runs", headers=headers)).json()
                    assert acme.id not in [x["run_id"] for x in listed["runs"]], label
                # the local token's owner still sees every tenant
                runner3, turl = await start_server(
                    client, "127.0.0.1", 0, lambda r: r, h.task_queue, Authenticator(token=TOKEN)
                )
                try:
                    r = await http.get(f"{turl}/runs/{acme.id}", headers=bearer)
                    assert r.status == 200
                finally:
                    await runner3.cleanup()
            warned = [r.getMessage() for r in caplog.records if "ignored tenant '*'" in r.message]
            assert len(warned) >= len(who) and "'eve'" in warned[0]
        finally:
            await runner.cleanup()
            await runner2.cleanup()
            await jr.cleanup()
            await acme.terminate("test over")


async def _other_type(client: Client, tenant: str, task_queue: str) -> Any:
    """A workflow of another type than AgentRun, in ``tenant`` (no worker: it just waits)."""
    key = SearchAttributeKey.for_keyword("TenantId")
    return await client.start_workflow(
        "NotAnAgentRun",
        id=f"other-{time.time_ns()}",
        task_queue=f"{task_queue}-none",
        search_attributes=TypedSearchAttributes([SearchAttributePair(key, tenant)]),
    )


async def test_another_tenants_run_a_missing_one_and_another_type_answer_the_same_404(
    client: Client, tmp_path: Path
):
    proxy = Authenticator(mode="proxy", trusted_proxies=frozenset({"127.0.0.1"}))
    bob = {"X-Forwarded-User": "bob", "X-Forwarded-Groups": "tenant:globex"}
    async with Harness(client, tmp_path, pending_write()) as h:
        acme, call_id = await _start_in(h, "acme")
        other = await _other_type(client, "globex", h.task_queue)
        runner, url = await start_server(client, "127.0.0.1", 0, lambda r: r, h.task_queue, proxy)
        token_runner, turl = await start_server(
            client, "127.0.0.1", 0, lambda r: r, h.task_queue, Authenticator(token=TOKEN)
        )
        ids = {"another tenant's": acme.id, "missing": "run-nope", "another type": other.id}
        try:
            async with aiohttp.ClientSession() as http:

                async def answer(base: str, path: str, hdrs: dict[str, str], **kw: Any) -> Any:
                    method = "POST" if kw else "GET"
                    async with http.request(method, base + path, headers=hdrs, **kw) as r:
                        return r.status, await r.json()

                for what, rid in ids.items():
                    nope = (404, {"error": f"no such run: {rid}"})
                    assert await answer(url, f"/runs/{rid}", bob) == nope, what
                    assert await answer(url, f"/runs/{rid}/events", bob) == nope, what
                    decide = {"json": {"tool_call_id": call_id}}
                    assert await answer(url, f"/runs/{rid}/approve", bob, **decide) == nope, what
                    suite = (404, {"error": f"no such suite: {rid}"})
                    assert await answer(url, f"/api/suites/{rid}", bob) == suite, what
                # all tenants (the local token): no 500 for a run that is no suite, or the reverse
                bearer = {"Authorization": f"Bearer {TOKEN}"}
                assert await answer(turl, f"/api/suites/{acme.id}", bearer) == (
                    404,
                    {"error": f"no such suite: {acme.id}"},
                )
                assert await answer(turl, f"/runs/{other.id}", bearer) == (
                    404,
                    {"error": f"no such run: {other.id}"},
                )
            st = await until_state(acme, lambda s: True)
            assert [p.tool_call_id for p in st.pending_approvals] == [call_id]
        finally:
            await runner.cleanup()
            await token_runner.cleanup()
            await acme.terminate("test over")
            await other.terminate("test over")


def _nested(depth: int, inner: str = "1") -> str:
    return '{"a":' * depth + inner + "}" * depth


async def test_bad_input_answers_400_naming_the_problem_and_the_console_keeps_serving(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("AGENT_MEMORY_URL", f"sqlite://{tmp_path / 'memory.db'}")
    monkeypatch.setenv("AGENT_STATE_DIR", str(tmp_path / "state"))
    async with Harness(client, tmp_path, pending_write()) as h:
        handle, call_id = await _start_in(h, "default")
        runner, url = await start_server(
            client, "127.0.0.1", 0, lambda r: r, h.task_queue, Authenticator(token=TOKEN)
        )
        auth = {"Authorization": f"Bearer {TOKEN}"}
        rid = handle.id
        deep = "[" * 200_000 + "]" * 200_000
        try:
            async with aiohttp.ClientSession(headers=auth) as http:

                async def post(path: str, body: str) -> tuple[int, str]:
                    hdrs = {"Content-Type": "application/json"}
                    async with http.post(url + path, data=body, headers=hdrs) as r:
                        return r.status, (await r.json())["error"]

                posts = ("/runs", *(f"/runs/{rid}/{x}" for x in ("approve", "reject")))
                posts += (f"/runs/{rid}/messages", f"/runs/{rid}/interrupt", "/api/memory/x/delete")
                for path in posts:
                    for body in (deep, _nested(65)):
                        status, error = await post(path, body)
                        assert status == 400 and "nests deeper than 64 levels" in error, path
                args = f'{{"tool_call_id": "{call_id}", "arguments": {_nested(900)}}}'
                for path in (f"/runs/{rid}/reject", f"/runs/{rid}/approve"):
                    status, error = await post(path, args)
                    assert status == 400 and "nests deeper than 64 levels" in error, path
                # 64 levels are allowed: the memory endpoint gets past the body to its own 404
                status, error = await post("/api/memory/x/delete", _nested(63, '{"b": 1}'))
                assert (status, error) == (404, "no such memory item of yours")
                events = f"{url}/runs/{rid}/events"
                for query, headers, name in (
                    ("?from=" + "9" * 5000, {}, "from"),
                    ("?from=%C2%B2", {}, "from"),  # "²": str.isdigit() says yes, int() says no
                    ("?from=-1", {}, "from"),
                    ("", {"Last-Event-ID": "9" * 5000}, "Last-Event-ID"),
                    ("", {"Last-Event-ID": "\u0663"}, "Last-Event-ID"),  # an Arabic-Indic 3
                ):
                    async with http.get(events + query, headers=headers) as r:
                        assert r.status == 400, (query[:20], headers.keys())
                        assert (await r.json())["error"].startswith(name + " must be"), name
                # still serving, and nothing above touched the run
                async with http.get(f"{url}/runs/{rid}") as r:
                    assert r.status == 200
                    st = await r.json()
                assert [p["tool_call_id"] for p in st["pending_approvals"]] == [call_id]
                async with http.get(f"{events}?from=0") as r:
                    assert r.status == 200
                    first = await r.content.readuntil(b"\n\n")
                assert first.startswith(b"id: 0\n")
        finally:
            await runner.cleanup()
            await handle.terminate("test over")


async def test_codec_server_healthz_checks_the_host_and_hides_its_settings(tmp_path: Path):
    s = settings_in(tmp_path)
    server = await start_codec_server(s, port=0, auth=Authenticator(token=TOKEN))
    port = server.url.rsplit(":", 1)[1]
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    try:
        async with aiohttp.ClientSession() as http:
            for path, method in (("/healthz", "GET"), ("/decode", "POST"), ("/encode", "POST")):
                for host in (f"attacker.example:{port}", "attacker.example", ""):
                    hdrs = {**bearer, "Host": host}
                    async with http.request(method, server.url + path, headers=hdrs) as r:
                        assert r.status == 421, (path, host)
                        text = await r.text()
                    assert str(s.payload_path) not in text and "threshold" not in text
            async with http.get(f"{server.url}/healthz") as r:
                assert r.status == 200 and await r.json() == {"status": "ok"}
            hdrs = {**bearer, "Host": f"localhost:{port}"}
            async with http.get(f"{server.url}/healthz", headers=hdrs) as r:
                mine = await r.json()
            assert mine["status"] == "ok" and mine["payload_dir"] == str(s.payload_path)
            assert mine["threshold_bytes"] == s.payload_threshold_bytes
    finally:
        await server.stop()
