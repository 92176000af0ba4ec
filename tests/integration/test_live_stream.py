"""The event stream of a run (CONTRACT.md "Event stream"): order, text deltas, resume, bounds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.harness import Harness
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, text, tool_call, tool_calls

ANSWER = "The file says the answer is 42, and the deploy to staging went through."


def step_texts(events: list[dict[str, Any]]) -> list[str]:
    """The text of each model step from its deltas (after the step's last model_retry)."""
    out: list[str] = []
    current: list[str] | None = None
    for ev in events:
        if ev["type"] == "model_started":
            current = []
        elif ev["type"] == "model_retry":
            current = []
        elif ev["type"] == "text_delta":
            assert current is not None, "a text_delta outside a model step"
            current.append(ev["delta"])
        elif ev["type"] == "model_finished":
            assert current is not None
            out.append("".join(current))
            current = None
    return out


async def collect(client: Client, run_id: str, from_offset: int = 0) -> list[dict[str, Any]]:
    return [ev async for ev in rc.follow(client, run_id, from_offset)]


def two_calls_and_approval() -> list:
    return [
        tool_calls(
            [("read_file", {"path": "README.md"}), ("deploy", {"target": "staging"})],
            content="Reading the file and deploying.",
        ),
        text(ANSWER).with_chunk_delay(0.02),
    ]


async def test_stream_of_a_run_with_two_tool_calls_and_an_approval(client: Client, tmp_path: Path):
    model = ScriptedModel(two_calls_and_approval(), chunk_chars=3)
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("read and deploy")
        events: list[dict[str, Any]] = []
        async for ev in rc.follow(client, handle.id):
            events.append(ev)
            if ev["type"] == "approval_requested":
                await rc.decide(client, handle.id, ev["tool_call_id"], "approve", "alice")
        res = await handle.result()
        # a finished run drains its retained items (a worker answers the query)
        again = await collect(client, handle.id)
    assert res.status == "completed" and res.output == ANSWER
    types = [e["type"] for e in events]
    assert [e["offset"] for e in events] == list(range(len(events)))
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert events[-1]["result"]["status"] == "completed"
    order = [
        t
        for t in types
        if t not in ("text_delta", "status", "tool_started", "tool_finished", "approval_decided")
    ]
    assert order == [
        "run_started",
        "model_started",
        "model_finished",
        "approval_requested",
        "model_started",
        "model_finished",
        "run_finished",
    ]
    tools = [(e["type"], e["name"]) for e in events if e["type"].startswith("tool_")]
    assert sorted(tools) == sorted(
        [
            ("tool_started", "read_file"),
            ("tool_finished", "read_file"),
            ("tool_started", "deploy"),
            ("tool_finished", "deploy"),
        ]
    )
    deploy_start = types.index("approval_decided")
    assert events[deploy_start]["decision"] == "approve"
    assert events[deploy_start]["principal_id"] == "alice"
    assert any(e["type"] == "tool_started" and e["name"] == "deploy" for e in events[deploy_start:])
    finished = [e for e in events if e["type"] == "tool_finished"]
    assert all(e["status"] == "ok" and e["duration_ms"] >= 0 for e in finished)
    assert step_texts(events) == ["Reading the file and deploying.", ANSWER]
    # watched: the answer came in several batches from the activity, not in one piece at the end
    last_step = events[types.index("model_started", types.index("approval_requested")) :]
    assert len([e for e in last_step if e["type"] == "text_delta"]) > 1
    statuses = [e["status"] for e in events if e["type"] == "status"]
    assert "awaiting_approval" in statuses
    assert [e["type"] for e in again] == types


async def test_unwatched_run_streams_nothing_and_still_adds_up(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("read_file", {"path": "README.md"}), text(ANSWER)])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("read")
        res = await handle.result()
        events = await collect(client, handle.id)
        history = await handle.fetch_history()
    assert res.status == "completed"
    assert step_texts(events) == ["", ANSWER]
    signals = [
        e for e in history.events if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    updates = [
        e
        for e in history.events
        if e.HasField("workflow_execution_update_accepted_event_attributes")
    ]
    assert signals == [] and updates == []


async def test_reconnecting_subscriber_misses_nothing(client: Client, tmp_path: Path):
    model = ScriptedModel(two_calls_and_approval(), chunk_chars=2)
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("read and deploy")
        first: list[dict[str, Any]] = []
        async for ev in rc.follow(client, handle.id):
            first.append(ev)
            if ev["type"] == "approval_requested":
                break  # the subscriber goes away mid-run
        await rc.decide(client, handle.id, first[-1]["tool_call_id"], "approve", "alice")
        await asyncio.sleep(0.3)
        rest = await collect(client, handle.id, first[-1]["offset"] + 1)
        everything = await collect(client, handle.id)
    assert first + rest == everything
    assert step_texts(first + rest)[-1] == ANSWER
