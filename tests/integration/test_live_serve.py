"""``agentctl serve``: Server-Sent Events with Last-Event-ID, JSON errors, the console in Chromium."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from temporalio.client import Client

from tests.support.harness import CHROMIUM, CHROMIUM_ARGS, Harness
from workers.console.auth import Authenticator
from workers.console.serve import start_server
from workers.testing.scripted_model import ScriptedModel, text, tool_call

REPO = Path(__file__).resolve().parents[2]
TOKEN = "console-test-token"
AUTH = Authenticator(token=TOKEN)
ANSWER = "I wrote notes.txt with the summary you asked for; it has three lines."


async def read_sse(resp: aiohttp.ClientResponse) -> list[tuple[str | None, str, str]]:
    """(id, event, data) of every SSE message until the server closes the stream."""
    out: list[tuple[str | None, str, str]] = []
    ev_id, event, data = None, "message", []
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if not line:
            if data:
                out.append((ev_id, event, "\n".join(data)))
            ev_id, event, data = None, "message", []
        elif line.startswith("id: "):
            ev_id = line[4:]
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
    return out


def ids_of(msgs: list[tuple[str | None, str, str]]) -> list[int]:
    """The ids of the ``message`` events, each of which has one."""
    ids: list[int] = []
    for i, e, _ in msgs:
        if e == "message":
            assert i is not None, "a message event without an id"
            ids.append(int(i))
    return ids


def events_of(msgs: list[tuple[str | None, str, str]]) -> list[dict[str, Any]]:
    return [json.loads(d) for _, e, d in msgs if e == "message"]


async def test_sse_stream_resumes_after_last_event_id(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("read_file", {"path": "README.md"}), text(ANSWER)])
    async with Harness(client, tmp_path, model) as h:
        runner, url = await start_server(
            client, "127.0.0.1", 0, lambda r: f"http://ui/{r}", auth=AUTH
        )
        try:
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            async with aiohttp.ClientSession(headers=bearer) as http:
                started = await http.post(
                    f"{url}/runs", json={"input": "read it"}, params={}, headers={}
                )
                assert started.status == 201
                # the console starts runs on AGENT_TASK_QUEUE; this test's worker has its own
                run_id = (await h.start("read it")).id
                async with http.get(f"{url}/runs/{run_id}/events") as resp:
                    assert resp.headers["Content-Type"].startswith("text/event-stream")
                    full = await read_sse(resp)
                ids = ids_of(full)
                assert ids == list(range(len(ids)))
                assert full[-1][1] == "end"
                evs = events_of(full)
                assert evs[-1]["type"] == "run_finished"
                cut = len(ids) // 2
                async with http.get(
                    f"{url}/runs/{run_id}/events", headers={"Last-Event-ID": str(cut)}
                ) as resp:
                    rest = await read_sse(resp)
                assert ids_of(rest) == ids[cut + 1 :]
                assert events_of(rest) == evs[cut + 1 :]
                async with http.get(f"{url}/runs/{run_id}/events?from=x") as resp:
                    assert resp.status == 400 and "from" in (await resp.json())["error"]
                async with http.get(f"{url}/runs/run-nope/events") as resp:
                    assert resp.status == 404 and "no such run" in (await resp.json())["error"]
                bad = await http.post(
                    f"{url}/runs", data="not json", headers={"Content-Type": "application/json"}
                )
                assert bad.status == 400 and "not JSON" in (await bad.json())["error"]
                empty = await http.post(f"{url}/runs", json={"input": ""})
                assert empty.status == 400 and "input" in (await empty.json())["error"]
                stale = await http.post(
                    f"{url}/runs/{run_id}/approve", json={"tool_call_id": "call_x"}
                )
                assert stale.status in (400, 404, 409)
                assert "error" in await stale.json()
                await http.post(f"{url}/runs/{started_id(await started.json())}/interrupt", json={})
        finally:
            await runner.cleanup()


def started_id(body: dict[str, Any]) -> str:
    assert body["run_id"].startswith("run-") and body["web_ui"].endswith(body["run_id"])
    return body["run_id"]


async def test_console_shows_a_run_live_and_approves_with_a_click(client: Client, tmp_path: Path):
    from playwright.async_api import async_playwright, expect

    assert Path(CHROMIUM).exists(), "chromium is missing: apt-get install -y chromium (.ci/run)"
    first = "I will save the summary to notes.txt now."
    model = ScriptedModel(
        [
            tool_call(
                "write_file",
                {"path": "notes.txt", "content": "one\ntwo\nthree\n"},
                content=first,
            ).with_chunk_delay(0.03),
            text(ANSWER).with_chunk_delay(0.03),
        ],
        chunk_chars=3,
    )
    async with Harness(client, tmp_path, model) as h:
        runner, url = await start_server(
            client, "127.0.0.1", 0, lambda r: f"http://127.0.0.1:8233/x/{r}", h.task_queue, AUTH
        )
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = await browser.new_page(viewport={"width": 1280, "height": 760})
                await page.goto(url + f"/?token={TOKEN}")
                await expect(page.locator("#principal")).to_have_text("console")
                await page.fill("#input", "Summarise the README into notes.txt")
                await page.click("#start button[type=submit]")
                await expect(page.locator("#timeline .step .text").first).to_have_text(
                    first, timeout=20_000
                )
                approve = page.get_by_role("button", name="Approve")
                await expect(approve).to_be_visible(timeout=20_000)
                await expect(page.locator("#run-status")).to_have_text("awaiting_approval")
                await expect(page.locator("#web-ui")).to_have_attribute(
                    "href", f"http://127.0.0.1:8233/x/{await page.inner_text('#run-id')}"
                )
                await page.screenshot(path=str(tmp_path / "console.png"), full_page=True)
                await approve.click()
                await expect(page.locator(".tool pre.result")).to_contain_text(
                    "notes.txt", timeout=20_000
                )
                await expect(page.locator("#timeline .finished")).to_have_text(
                    "Run completed: the model answered", timeout=20_000
                )
                await expect(page.locator("#timeline .step .text").last).to_have_text(ANSWER)
                await expect(page.locator("#runs tr.current")).to_have_count(1, timeout=10_000)
                await browser.close()
        finally:
            await runner.cleanup()
    assert (h.workspace / "notes.txt").read_text() == "one\ntwo\nthree\n"
    if os.environ.get("SAVE_CONSOLE_SCREENSHOT"):
        shutil.copy(tmp_path / "console.png", REPO / "docs" / "console.png")


@pytest.fixture(autouse=True)
def _queue_for_console(monkeypatch):
    # POST /runs without a task queue of the server's own goes to AGENT_TASK_QUEUE: keep it unique
    monkeypatch.setenv("AGENT_TASK_QUEUE", "tq-console-unserved")


async def test_console_answers_a_client_tool(client: Client, tmp_path: Path):
    """A client tool's call shows as a card; the person's result goes to the model (issue #38)."""
    from playwright.async_api import async_playwright, expect

    pick = {"name": "pick_file", "client": True, "description": "Pick a file.", "parameters": {}}
    model = ScriptedModel([tool_call("pick_file", {}), text("you picked it")])
    async with Harness(client, tmp_path, model, agents={"default": {"tools": [pick]}}) as h:
        runner, url = await start_server(client, "127.0.0.1", 0, lambda r: r, h.task_queue, AUTH)
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = await browser.new_page(viewport={"width": 1280, "height": 760})
                await page.goto(url + f"/?token={TOKEN}")
                await page.fill("#input", "pick a file")
                await page.click("#start button[type=submit]")
                send = page.get_by_role("button", name="Send result")
                await expect(send).to_be_visible(timeout=20_000)
                await expect(page.locator(".client-tool")).to_contain_text("pick_file")
                await page.fill(".client-tool textarea", "report.pdf")
                await send.click()
                await expect(page.locator(".tool pre.result")).to_contain_text(
                    "report.pdf", timeout=20_000
                )
                await expect(page.locator(".client-tool")).to_have_count(0)
                await expect(page.locator("#timeline .finished")).to_have_text(
                    "Run completed: the model answered", timeout=20_000
                )
                await browser.close()
        finally:
            await runner.cleanup()
    told = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert told == ["report.pdf"]
