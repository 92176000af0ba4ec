"""The run console as a person uses it (issue #38 part 5), in headless Chromium.

The list shows what each run was asked, by whom, when, its agent, status and cost, and filters by
status, agent and person on the server; an evaluation suite's runs are on the suite's page, not
in the list; a closed run's page is read from its history with every worker stopped; an open
run's page says no worker answers; a page offers only the controls the run's status allows.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import aiohttp
from temporalio.client import Client

from activities.evals.contracts import SuiteRequest, Variant
from tests.support import evals
from tests.support.console import serve_console
from tests.support.harness import CHROMIUM, CHROMIUM_ARGS, Harness, until_state
from workers import client as rc
from workers.console.auth import Authenticator
from workers.eval_client import start_suite
from workers.testing.scripted_model import ScriptedModel, text, tool_call

REPO = Path(__file__).resolve().parents[2]
TOKEN = "console-views-token"
SUMMARY = "The README says the answer is 42."
ASKED = "Summarise the README for the release notes of this week, in one short line, for the team please"


def responder(body: dict[str, Any]):
    """``[write]``: write_file (held for approval); ``[capital]``: the suite's case; else a summary."""
    user = evals.user_text(body)
    if "[capital]" in user:
        return evals.responder(body)
    if "[write]" in user and body["messages"][-1]["role"] != "tool":
        return tool_call("write_file", {"path": "out.txt", "content": "x"})
    return text(SUMMARY)


async def _rows(page: Any) -> list[dict[str, str]]:
    """The run list's rows as {column header: cell text}, and the row's run id as ``id``."""
    return await page.evaluate(
        """() => {
          const heads = [...document.querySelectorAll('#runs thead th')].map(t => t.textContent);
          return [...document.querySelectorAll('#runs tbody tr[data-run-id]')].map(tr => {
            const row = {id: tr.dataset.runId};
            [...tr.children].forEach((td, i) => { row[heads[i]] = td.textContent; });
            return row;
          });
        }"""
    )


async def _until_rows(page: Any, pred: Any, timeout: float = 20.0) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for _ in range(int(timeout / 0.2)):
        rows = await _rows(page)
        if pred(rows):
            return rows
        await asyncio.sleep(0.2)
    raise AssertionError(f"the list never matched: {rows}")


async def _visible_controls(page: Any) -> set[str]:
    out = set()
    for name in ("Interrupt", "Pause", "Resume", "Approve", "Reject", "Send"):
        for b in await page.get_by_role("button", name=name, exact=True).all():
            if await b.is_visible():
                out.add(name)
    return out


async def test_the_list_filters_groups_and_pages_read_history_without_a_worker(
    client: Client, tmp_path: Path
):
    from playwright.async_api import async_playwright, expect

    agents = {"default": {}, "writer": {}, **evals.AGENTS}
    async with Harness(client, tmp_path, ScriptedModel(responder=responder), agents=agents) as h:
        done = await h.start(ASKED, principal_id="alice")
        assert (await done.result()).status == "completed"
        other = await h.start("Tidy the notes", principal_id="bob")
        await other.result()
        held = await h.start("[write] save the output", agent="writer", principal_id="bob")
        await until_state(held, lambda s: s.pending_approvals)
        chat = await h.start("Let us talk", mode="chat", principal_id="alice")
        await until_state(chat, lambda s: s.status == "waiting_for_message")
        await rc.pause(client, chat.id, "alice")
        await until_state(chat, lambda s: s.paused)
        suite = await start_suite(
            client,
            SuiteRequest(
                dataset="views",
                cases=evals.CASES[:1],
                variants=[Variant(name="careful", agent="careful")],
            ),
            task_queue=h.task_queue,
        )
        await suite.result()
        children: list[str] = []
        for _ in range(100):  # visibility is eventually consistent
            query = f"ParentWorkflowId = '{suite.id}'"
            children = [wf.id async for wf in client.list_workflows(query)]
            if children:
                break
            await asyncio.sleep(0.1)
        [suite_child] = children
        runner, url = await serve_console(client, h.task_queue, Authenticator(token=TOKEN))
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = await browser.new_page(viewport={"width": 1400, "height": 900})
                await page.goto(f"{url}/?token={TOKEN}")
                await expect(page.locator("#principal")).to_have_text("console")
                mine = {done.id, other.id, held.id, chat.id}

                def listed(rs: list[dict[str, str]]) -> bool:
                    # visibility is eventually consistent: wait for the last upserts to show
                    st = {r["id"]: r["Status"] for r in rs}
                    return (
                        mine <= st.keys()
                        and st[done.id] == "completed"
                        and (st[held.id] == "awaiting approval")
                    )

                rows = await _until_rows(page, listed)
                heads = await page.locator("#runs thead th").all_inner_texts()
                assert [x.lower() for x in heads] == [
                    "request",
                    "agent",
                    "person",
                    "started",
                    "status",
                    "cost",
                ]
                by_id = {r["id"]: r for r in rows}
                assert by_id[done.id]["Request"] == ASKED[:69] + "…"
                assert by_id[done.id]["Person"] == "alice"
                assert by_id[done.id]["Agent"] == "default"
                assert by_id[done.id]["Status"] == "completed"
                assert by_id[done.id]["Cost"].startswith("$")
                assert by_id[done.id]["Started"]
                assert by_id[held.id]["Request"] == "[write] save the output"
                assert by_id[held.id]["Agent"] == "writer"
                assert by_id[held.id]["Status"] == "awaiting approval"
                # the suite's run is not among people's runs, nor is the suite
                assert suite_child not in by_id and suite.id not in by_id

                # filters, answered by the server
                await page.fill("#f-principal", "alice")
                await page.press("#f-principal", "Enter")
                rows = await _until_rows(page, lambda rs: {r["Person"] for r in rs} == {"alice"})
                assert {done.id, chat.id} <= {r["id"] for r in rows}
                assert held.id not in {r["id"] for r in rows}
                await page.fill("#f-principal", "")
                await page.select_option("#f-status", "awaiting_approval")
                rows = await _until_rows(
                    page, lambda rs: {r["Status"] for r in rs} == {"awaiting approval"}
                )
                assert held.id in {r["id"] for r in rows} and done.id not in {r["id"] for r in rows}
                await page.select_option("#f-status", "")
                await page.fill("#f-agent", "writer")
                await page.press("#f-agent", "Enter")
                rows = await _until_rows(page, lambda rs: {r["Agent"] for r in rs} == {"writer"})
                assert held.id in {r["id"] for r in rows}
                await page.fill("#f-agent", "")
                await page.click("#f-mine")  # the signed-in person: "console"
                await expect(page.locator("#f-principal")).to_have_value("console")
                # the list reloads: until then it still shows the agent filter's (bob's) rows
                rows = await _until_rows(page, lambda rs: all(r["Person"] == "console" for r in rs))
                assert done.id not in {r["id"] for r in rows}
                await page.fill("#f-principal", "nobody-at-all")
                await page.press("#f-principal", "Enter")
                await expect(page.locator("#runs tr.empty")).to_have_text("no runs match")
                async with aiohttp.ClientSession(
                    headers={"Authorization": f"Bearer {TOKEN}"}
                ) as http:
                    r = await http.get(f"{url}/api/runs?status=nonsense")
                    assert r.status == 400 and "status must be one of" in (await r.json())["error"]
                    r = await http.get(f"{url}/api/runs", params={"agent": "x' OR 1=1 OR 'a"})
                    assert r.status == 200 and (await r.json())["runs"] == []

                # controls by status, a worker answering
                await page.goto(f"{url}/#run={held.id}")
                await expect(page.get_by_role("button", name="Approve")).to_be_visible(
                    timeout=15_000
                )
                assert await _visible_controls(page) == {
                    "Interrupt",
                    "Pause",
                    "Approve",
                    "Reject",
                    "Send",
                }
                await page.goto(f"{url}/#run={chat.id}")
                await expect(page.get_by_role("button", name="Resume")).to_be_visible()
                assert await _visible_controls(page) == {"Interrupt", "Resume", "Send"}

                # every worker stopped
                await h.stop_worker()
                await page.goto(f"{url}/#run={done.id}")
                await expect(page.locator("#timeline .finished")).to_have_text(
                    "Run completed: the model answered", timeout=15_000
                )
                await expect(page.locator("#run-status")).to_have_text("completed")
                await expect(page.locator("#timeline .step .text")).to_have_text(SUMMARY)
                await expect(page.locator("#run-meta")).to_contain_text(ASKED)
                await expect(page.locator("#run-meta")).to_contain_text("alice@default")
                assert await _visible_controls(page) == set()
                assert await page.locator("#note").is_hidden()

                await page.goto(f"{url}/#run={held.id}")
                await expect(page.locator("#note")).to_contain_text(
                    "no worker answering", timeout=20_000
                )
                await expect(page.locator("#run-status")).to_have_text("awaiting_approval")
                await expect(page.locator("#run-meta")).to_contain_text("[write] save the output")
                # no worker: a decision (an update) cannot be taken; signals wait for one
                assert await _visible_controls(page) == {"Interrupt", "Pause", "Send"}
                # closed by Temporal: the list and the page say so, not its last live status
                await held.terminate(reason="stopped by the test")
                await page.reload()
                await expect(page.locator("#timeline .finished")).to_have_text(
                    "Run terminated: stopped by the test", timeout=15_000
                )
                assert await _visible_controls(page) == set()
                assert await page.locator("#note").is_hidden()
                await page.fill("#f-principal", "bob")
                await page.press("#f-principal", "Enter")
                rows = await _until_rows(
                    page, lambda rs: {r["id"]: r["Status"] for r in rs}.get(held.id) == "terminated"
                )

                # the suite's page lists its runs, which open in the console from history
                await page.goto(f"{url}/suites/{suite.id}")
                link = page.locator("#suite-runs a")
                await expect(link).to_have_text(suite_child, timeout=15_000)
                await link.click()
                await expect(page.locator("#run-id")).to_have_text(suite_child)
                await expect(page.locator("#timeline .finished")).to_contain_text(
                    "Run completed", timeout=15_000
                )
                assert await _visible_controls(page) == set()
                await page.screenshot(path=str(tmp_path / "console-views.png"), full_page=True)
                if os.environ.get("SAVE_CONSOLE_SCREENSHOT"):
                    await page.goto(f"{url}/#run={done.id}")
                    await expect(page.locator("#timeline .finished")).to_be_visible()
                    await page.screenshot(path=str(REPO / "docs" / "console-views.png"))
                await browser.close()
        finally:
            await runner.cleanup()
            await chat.terminate("test over")
