"""The event stream of a run (docs/contract.md "Event stream"): order, text deltas, resume, bounds."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.support.harness import Harness
from tests.support.live import (
    CHAIN_THRESHOLD,
    TWO_STEPS_AND_AN_APPROVAL,
    chain_of_turns,
    read_approving,
    step_texts,
    watched_through_a_crash,
)
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, text, tool_call, tool_calls

ANSWER = "The file says the answer is 42, and the deploy to staging went through."


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
    async with Harness(client, tmp_path, model, worker=False) as h:
        handle = await h.start("read and deploy")
        watching = asyncio.ensure_future(
            read_approving(rc.follow(client, handle.id), client, handle.id)
        )
        # The follower's first poll (an update) waits at the server for a worker, so the run's
        # first workflow task already knows it is watched: both model steps stream.
        await asyncio.sleep(0.5)
        await h.start_worker()
        events = await asyncio.wait_for(watching, timeout=60)
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
    assert order == TWO_STEPS_AND_AN_APPROVAL
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
    # the follower polled before the steps were scheduled: both were streamed requests
    assert [r.body.get("stream") for r in model.requests] == [True, True]
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
    # nobody watched: each step was one plain request, its text emitted whole by the workflow
    assert [r.body.get("stream") for r in model.requests] == [None, None]
    deltas = [e["delta"] for e in events if e["type"] == "text_delta"]
    assert deltas == [ANSWER]
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


LONG = (
    "Streaming survives a crash: this reply is written slowly, in small pieces, so that the "
    "worker can be killed while the text is still arriving at the subscriber."
)


async def test_worker_killed_mid_stream_yields_model_retry_and_the_right_text(
    client: Client, dev_server_address: str, tmp_path: Path, monkeypatch
):
    """Workers without a live channel publish through the run's stream (Signals)."""
    monkeypatch.setenv("AGENT_LIVE_ADDRESS", "off")
    model = ScriptedModel(
        [text(LONG).with_chunk_delay(0.05), text(LONG).with_chunk_delay(0.01)], chunk_chars=3
    )
    async with Harness(client, tmp_path, model, worker=False) as h:
        # mid-stream, at the first delta: the process is gone
        res, events = await watched_through_a_crash(
            h,
            dev_server_address,
            tmp_path / "worker.log",
            lambda run_id: rc.follow(client, run_id),
            lambda ev: ev["type"] == "text_delta",
        )
    assert res.status == "completed" and res.output == LONG
    retries = [e for e in events if e["type"] == "model_retry"]
    assert len(retries) == 1 and retries[0]["attempt"] == 2
    before = "".join(
        e["delta"] for e in events[: events.index(retries[0])] if e["type"] == "text_delta"
    )
    assert before and LONG.startswith(before) and before != LONG  # partial text, then void
    assert step_texts(events) == [LONG]
    assert model.count == 2


async def _chain(client: Client, run_id: str, first_run_id: str) -> list[Any]:
    """The histories of every run of a continue-as-new chain, in order."""
    out, rid = [], first_run_id
    while rid:
        hist = await client.get_workflow_handle(run_id, run_id=rid).fetch_history()
        out.append(hist)
        last = hist.events[-1]
        rid = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last.HasField("workflow_execution_continued_as_new_event_attributes")
            else ""
        )
    return out


async def test_long_watched_run_keeps_history_and_stream_bounded(
    client: Client, tmp_path: Path, monkeypatch
):
    from workflows import events as wf_events

    monkeypatch.setattr(wf_events, "MAX_CARRIED_ITEMS", 60)
    monkeypatch.setattr(wf_events, "MAX_CARRIED_BYTES", 12 * 1024)
    turns = 14
    texts, model, agents = chain_of_turns(turns)
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("a long one")
        seen = [ev async for ev in rc.follow(client, handle.id)]
        res = await handle.result()
        retained = await collect(client, handle.id)
        chain = await _chain(client, handle.id, handle.result_run_id or "")
    assert res.status == "completed" and res.turns == turns + 1
    assert len(chain) >= 3, "the run should have continued as new"
    # the live subscriber followed the whole chain and missed nothing
    offsets = [e["offset"] for e in seen]
    assert offsets == list(range(len(seen)))
    assert step_texts(seen) == [*texts, "all done"]
    for hist in chain:
        size = sum(e.ByteSize() for e in hist.events)
        assert size < 2 * CHAIN_THRESHOLD, f"a run of the chain grew to {size} bytes"
    for hist in chain[1:]:
        carried = hist.events[0].workflow_execution_started_event_attributes.input.payloads[0]
        carry_events = json.loads(carried.data)["carry"]["events"]
        assert len(carry_events["log"]) <= 60
        assert len(json.dumps(carry_events)) < 3 * 12 * 1024  # base64 of <= 12 KiB, plus keys
    # the last run holds only what was carried plus its own items: offsets go on from the base
    assert retained[-1]["type"] == "run_finished" and retained[-1]["offset"] == offsets[-1]
    assert retained[0]["offset"] > 0 and len(retained) < len(seen)
    assert retained == seen[-len(retained) :]


async def test_a_step_that_ends_without_a_reply_is_closed_in_the_stream(
    client: Client, tmp_path: Path
):
    """A step that fails for good, and one cut by an interrupt, still get their model_finished."""
    from workers.testing.scripted_model import error

    def pairs(events: list[dict[str, Any]]) -> list[str]:
        return [e["type"] for e in events if e["type"] in ("model_started", "model_finished")]

    failing = ScriptedModel([error(500), error(500)])
    agents = {"default": {"model_max_attempts": 2}}
    async with Harness(client, tmp_path, failing, agents=agents) as h:
        handle = await h.start("go")
        events = await collect(client, handle.id)
        assert (await handle.result()).status == "failed"
    assert pairs(events) == ["model_started", "model_finished"]
    assert events[-1]["type"] == "run_finished"

    slow = ScriptedModel([text("never read", delay=30)])
    (tmp_path / "slow").mkdir()
    async with Harness(client, tmp_path / "slow", slow) as h:
        handle = await h.start("go")
        while slow.count == 0:
            await asyncio.sleep(0.05)
        await rc.interrupt(client, handle.id, "alice", "enough")
        res = await handle.result()
        events = await collect(client, handle.id)
    assert res.status == "interrupted"
    assert pairs(events) == ["model_started", "model_finished"]
    closing = [e for e in events if e["type"] == "model_finished"][0]
    assert events.index(closing) < len(events) - 1 and events[-1]["type"] == "run_finished"
