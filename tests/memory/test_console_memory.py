"""The run console's memory panel (issue #21): a person sees what runs remember about them, and
only that, and deletes an item for real, logged with their principal; in real Chromium."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from temporalio.client import Client

from activities.memory import MemoryItem, Namespace, open_store
from tests.support.harness import CHROMIUM, CHROMIUM_ARGS
from workers.console.auth import Authenticator
from workers.console.serve import start_server

TOKEN = "memory-panel-token"


async def test_a_person_sees_and_forgets_their_own_memory_only(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from playwright.async_api import async_playwright

    url = f"sqlite://{tmp_path / 'memory.db'}"
    monkeypatch.setenv("AGENT_MEMORY_URL", url)
    monkeypatch.setenv("AGENT_STATE_DIR", str(tmp_path / "state"))
    store = open_store(url)
    mine = store.put(
        MemoryItem(
            namespace=Namespace(tenant_id="default", scope="user:console"),
            text="Prefers answers with line numbers.",
        )
    )
    theirs = store.put(
        MemoryItem(
            namespace=Namespace(tenant_id="default", scope="user:mallory"),
            text="Mallory's private note.",
        )
    )
    runner, base = await start_server(
        client, "127.0.0.1", 0, lambda r: r, None, Authenticator(token=TOKEN, principal="console")
    )
    proxy = Authenticator(mode="proxy", trusted_proxies=frozenset({"127.0.0.1"}))
    runner2, base2 = await start_server(client, "127.0.0.1", 0, lambda r: r, None, proxy)
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = await browser.new_page()
            await page.goto(f"{base}/?token={TOKEN}")
            await page.wait_for_selector("#memory .memory-item", timeout=20_000)
            shown = await page.inner_text("#memory")
            assert "Prefers answers with line numbers." in shown
            assert "Mallory" not in shown
            await page.click("#memory .memory-item button")
            await page.wait_for_selector("#memory .empty", timeout=20_000)
            await browser.close()
        assert store.get("default", mine.id) is None  # a real delete
        assert store.get("default", theirs.id) is not None
        [entry] = [
            json.loads(line)
            for line in (tmp_path / "state" / "memory-audit.jsonl").read_text().splitlines()
        ]
        assert (entry["event"], entry["by"], entry["item"]["id"]) == (
            "memory_deleted",
            "console",
            mine.id,
        )
        async with aiohttp.ClientSession() as http:
            # another tenant's person: nothing of tenant default, not even by naming it
            acme = {"X-Forwarded-User": "mallory", "X-Forwarded-Groups": "tenant:acme"}
            r = await http.get(f"{base2}/api/memory?tenant=default", headers=acme)
            assert r.status == 404
            r = await http.get(f"{base2}/api/memory", headers=acme)
            assert (await r.json())["items"] == []
            # mallory of tenant default sees her own item, and cannot delete the console's
            mal = {"X-Forwarded-User": "mallory", "X-Forwarded-Groups": "tenant:default"}
            items = (await (await http.get(f"{base2}/api/memory", headers=mal)).json())["items"]
            assert [i["id"] for i in items] == [theirs.id]
            other = store.put(
                MemoryItem(
                    namespace=Namespace(tenant_id="default", scope="user:console"), text="x y"
                )
            )
            r = await http.post(
                f"{base2}/api/memory/{other.id}/delete",
                json={"tenant_id": "default"},
                headers={**mal, "Origin": base2},
            )
            assert r.status == 404 and store.get("default", other.id) is not None
    finally:
        await runner.cleanup()
        await runner2.cleanup()
