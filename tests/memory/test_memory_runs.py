"""Memory across runs (issue #21): a run's facts are consolidated in the background by a durable
workflow, and the next run's model step is given them, recorded in its history."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory

from activities.memory import Namespace, open_store
from tests.support.harness import Harness, until_state
from workers import client as rc
from workers.history import replay_histories
from workers.testing.scripted_model import ScriptedModel, text, tool_call

FACT = "The user's project is called Falcon and uses PostgreSQL."
EXTRACTION = json.dumps({"facts": [{"text": FACT, "replaces": None}]})
MEMORY = {"memory": {"read": ["user"], "write": ["user"], "consolidate_after_seconds": 0.2}}


STORED = Path(__file__).resolve().parents[1] / "histories" / "memory" / "handoff.json"
"""A run whose spec writes memory: its end hands off to consolidation (patch memory-consolidation)."""


async def _wait_items(url: str, ns: Namespace, n: int) -> list:
    store = open_store(url)
    for _ in range(200):
        items = store.list(ns)
        if len(items) >= n:
            return items
        await asyncio.sleep(0.1)
    raise AssertionError("consolidation wrote nothing")


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_second_run_is_given_what_the_first_taught(
    client: Client, tmp_path: Path, backend: str, request: pytest.FixtureRequest
):
    model = ScriptedModel(
        [
            text("Noted: Falcon on PostgreSQL."),
            text(EXTRACTION),  # the consolidation workflow's extraction request
            text("Your project is Falcon."),
        ]
    )
    who = f"dana-{backend}"  # one consolidation workflow per (tenant, principal): not shared
    h = Harness(client, tmp_path, model, agents={"default": MEMORY})
    if backend == "postgres":
        h.memory_url = request.getfixturevalue("postgres_url")
    async with h:
        first_h = await h.start(
            "My project is called Falcon; it runs on PostgreSQL.", principal_id=who
        )
        first = await first_h.result()
        assert first.status == "completed"
        if os.environ.get("RECORD_MEMORY_HISTORY"):
            STORED.parent.mkdir(parents=True, exist_ok=True)
            STORED.write_text((await first_h.fetch_history()).to_json())
        url = h.settings.memory_store_url
        ns = Namespace(tenant_id="default", scope=f"user:{who}")
        [item] = await _wait_items(url, ns, 1)
        assert item.text == FACT and item.provenance.source == "consolidation"
        assert item.provenance.run_id is not None
        handle = await h.start("What is my project called?", principal_id=who)
        events = [ev async for ev in rc.follow(client, handle.id)]
        second = await handle.result()
        assert second.status == "completed" and second.output == "Your project is Falcon."
        st = await until_state(handle, lambda s: True)
    sent = model.requests[2].messages
    block = [m["content"] for m in sent if m["role"] == "system" and "Memory" in m["content"]]
    assert block and item.id in block[0] and FACT in block[0]
    assert [e["ids"] for e in events if e["type"] == "memory_retrieved"] == [[item.id]]
    results = [
        e.activity_task_completed_event_attributes.result.payloads[0].data
        for e in (await handle.fetch_history()).events
        if e.HasField("activity_task_completed_event_attributes")
    ]
    recorded = [d["memory"] for d in map(json.loads, results) if d.get("memory")]
    assert recorded == [[{"id": item.id, "scope": f"user:{who}", "text": FACT}]]
    assert st.memory == [item.id]


async def test_memory_is_per_principal_and_costs_nothing_without_a_spec(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([text("ok"), text("ok")])
    async with Harness(client, tmp_path, model, agents={"default": {}, "mem": MEMORY}) as h:
        open_store(h.settings.memory_store_url)  # created, empty for eve
        plain = await h.run("hello", principal_id="eve")
        assert plain.status == "completed"
        res = await h.run("What is my project called?", agent="mem", principal_id="eve")
    assert res.status == "completed"
    for r in model.requests:
        assert not any(
            m["role"] == "system" and m["content"].startswith("Memory") for m in r.messages
        )


async def test_the_model_remembers_and_searches_through_tools(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [
            tool_call("remember", {"text": "Frank's staging host is stg-7."}),
            tool_call("remember", {"text": " Frank's  staging host\nis stg-7."}),
            tool_call("search_memory", {"query": "staging host"}),
            text("stg-7"),
        ]
    )
    agents = {
        "default": {
            "tools": ["remember", "search_memory"],
            "policy": {"tools": {"remember": {"action": "allow"}}},
        }
    }
    async with Harness(client, tmp_path, model, agents=agents) as h:
        res = await h.run("remember my staging host", principal_id="frank", tenant_id="t9")
        store = open_store(h.settings.memory_store_url)
        other = store.list(Namespace(tenant_id="default", scope="user:frank"))
        kept = store.list(Namespace(tenant_id="t9", scope="user:frank"))
    assert res.status == "completed"
    found = [m["content"] for m in model.requests[3].messages if m["role"] == "tool"]
    assert [i.text for i in kept] == ["Frank's staging host is stg-7."]  # the second was the same
    assert found[0] == f"remembered as {kept[0].id}"
    assert found[1] == f"already remembered as {kept[0].id}"
    assert "stg-7" in found[-1]
    assert other == []  # written in tenant t9 only


async def test_the_stored_memory_handoff_history_replays():
    history = WorkflowHistory.from_json("memory", STORED.read_text())
    report = await replay_histories([history])
    assert report.compatible, report.failure
    names = [e.marker_recorded_event_attributes.marker_name for e in history.events]
    assert {"core_patch", "core_local_activity"} <= set(names)  # the patch and the handoff
