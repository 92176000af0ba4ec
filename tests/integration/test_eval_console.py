"""An evaluation suite shown live in the run console (issue #24): the console lists the suite, its
page shows per variant pass@1 and pass^k, the paired comparison and the cases as the children
finish, in real Chromium; another tenant's person gets 404."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
from temporalio.client import Client

from activities.evals.contracts import SuiteRequest, Variant
from tests.support.evals import AGENTS, CASES, responder
from tests.support.harness import CHROMIUM, CHROMIUM_ARGS, Harness
from workers.console.auth import Authenticator
from workers.console.serve import start_server
from workers.eval_client import start_suite
from workers.testing.scripted_model import ScriptedModel

TOKEN = "suite-view-token"


async def test_the_console_shows_a_suite_live_and_hides_it_from_other_tenants(
    client: Client, tmp_path: Path
):
    from playwright.async_api import async_playwright

    async with Harness(client, tmp_path, ScriptedModel(responder=responder), agents=AGENTS) as h:
        req = SuiteRequest(
            dataset="console",
            cases=CASES[:2],  # capital (sloppy fails it) and calc
            variants=[
                Variant(name="careful", agent="careful"),
                Variant(name="sloppy", agent="sloppy"),
            ],
            tenant_id="evals-team",
        )
        handle = await start_suite(client, req, task_queue=h.task_queue)
        runner, url = await start_server(
            client, "127.0.0.1", 0, lambda r: r, h.task_queue, Authenticator(token=TOKEN)
        )
        proxy = Authenticator(mode="proxy", trusted_proxies=frozenset({"127.0.0.1"}))
        runner2, url2 = await start_server(client, "127.0.0.1", 0, lambda r: r, h.task_queue, proxy)
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = await browser.new_page()
                await page.goto(f"{url}/?token={TOKEN}")
                await page.wait_for_selector(f"#suites a:text('{handle.id}')", timeout=20_000)
                await page.click(f"#suites a:text('{handle.id}')")
                assert page.url == f"{url}/suites/{handle.id}"
                deadline = time.monotonic() + 90
                while "finished" not in (await page.inner_text("#suite-progress")):
                    assert time.monotonic() < deadline, await page.inner_text("body")
                    await asyncio.sleep(0.5)
                assert (await page.inner_text("#suite-progress")).startswith("4 of 4 runs")
                variants = await page.inner_text("#variants")
                assert "careful\t2\t100.0%" in variants and "sloppy\t2\t50.0%" in variants
                comparison = await page.inner_text("#comparison")
                assert comparison.startswith("sloppy against careful over 2 cases")
                assert "McNemar p" in comparison
                cases = await page.inner_text("#cases")
                assert "capital\t1/1\t0/1" in cases and "calc\t1/1\t1/1" in cases
                await browser.close()
            await handle.result()
            # a person of another tenant neither sees nor reads the suite
            async with aiohttp.ClientSession() as http:
                other = {"X-Forwarded-User": "bob", "X-Forwarded-Groups": "tenant:acme"}
                mine = {"X-Forwarded-User": "eve", "X-Forwarded-Groups": "tenant:evals-team"}
                r = await http.get(f"{url2}/api/suites/{handle.id}", headers=other)
                assert r.status == 404
                listed = await (await http.get(f"{url2}/api/suites", headers=other)).json()
                assert handle.id not in [s["suite_id"] for s in listed["suites"]]
                r = await http.get(f"{url2}/api/suites/{handle.id}", headers=mine)
                assert r.status == 200 and (await r.json())["done"] is True
                r = await http.get(f"{url2}/api/suites/{handle.id}")  # no identity
                assert r.status == 401
        finally:
            await runner.cleanup()
            await runner2.cleanup()
