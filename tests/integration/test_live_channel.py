"""Watching through the workers' live channel (issue #38): order, deltas, resume, other addresses.

The worker serves its live channel on 127.0.0.2 (another address than the console's 127.0.0.1 and
the test's client): the reader finds it from the worker's identity, as a console on another host
would. The histories are checked for what watching must not add: no Signal, no poll Update.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from activities.live import sign_token
from tests.support.harness import Harness
from tests.support.live import (
    TWO_STEPS_AND_AN_APPROVAL,
    chain_of_turns,
    events_of,
    read_approving,
    read_sse_approving,
    step_texts,
    watched_through_a_crash,
)
from workers import client as rc
from workers import live_reader
from workers.console.auth import Authenticator
from workers.console.serve import start_server
from workers.live_reader import ReaderStats, run_events
from workers.testing.scripted_model import ScriptedModel, text, tool_call, tool_calls

SECRET = b"live-channel-test-secret"
TOKEN = "live-channel-console-token"
AUTH = Authenticator(token=TOKEN)
WORKER_ADDRESS = "127.0.0.2:0"
FIRST = "Reading the file and deploying it to staging now."
ANSWER = "The file says the answer is 42, and the deploy to staging went through."


def script() -> list[Any]:
    return [
        tool_calls(
            [("read_file", {"path": "README.md"}), ("deploy", {"target": "staging"})],
            content=FIRST,
        ).with_chunk_delay(0.03),
        text(ANSWER).with_chunk_delay(0.03),
    ]


def approval_first(reply: str) -> list[Any]:
    """A call that waits for approval, then ``reply`` written slowly.

    The reader approves, so it is surely watching when the reply's step starts (a step that
    starts before anyone watches is not streamed: its text comes when it ends).
    """
    return [tool_call("deploy", {"target": "staging"}), text(reply).with_chunk_delay(0.03)]


def step_items(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if not e.get("live")]


async def read_after(
    client: Client, run_id: str, last: dict[str, Any], stats: ReaderStats
) -> list[dict[str, Any]]:
    """A reader that resumes after ``last``: from its offset on, less its ``chars`` already read."""
    items = run_events(
        client,
        run_id,
        last["offset"] + 1,
        secret=SECRET,
        skip_chars=last.get("chars", 0),
        stats=stats,
    )
    return [ev async for ev in items]


async def counts(client: Client, run_id: str) -> tuple[int, int]:
    """(signals, accepted updates) in the run's history."""
    hist = await client.get_workflow_handle(run_id).fetch_history()
    sig = sum(e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED for e in hist.events)
    upd = sum(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED for e in hist.events
    )
    return sig, upd


async def test_watched_run_in_order_with_live_deltas_and_no_signal(client: Client, tmp_path: Path):
    model = ScriptedModel(script(), chunk_chars=3)
    async with Harness(client, tmp_path, model, live=WORKER_ADDRESS, live_secret=SECRET) as h:
        assert h.live is not None and h.live.url.startswith("http://127.0.0.2:")
        handle = await h.start("read and deploy")
        stats = ReaderStats()
        items = run_events(client, handle.id, secret=SECRET, stats=stats)
        events = await read_approving(items, client, handle.id)
        res = await handle.result()
        signals, updates = await counts(client, handle.id)
        # read again once finished: the same step items (from the live channel's retention)
        again = [ev async for ev in run_events(client, handle.id, secret=SECRET)]
    assert res.status == "completed" and res.output == ANSWER
    steps = step_items(events)
    assert [e["offset"] for e in steps] == list(range(len(steps)))
    order = [
        e["type"]
        for e in steps
        if e["type"] in ("run_started", "model_started", "model_finished", "approval_requested")
        or e["type"] == "run_finished"
    ]
    assert order == TWO_STEPS_AND_AN_APPROVAL
    assert step_texts(events) == [FIRST, ANSWER]
    live = [e for e in events if e.get("live") and e["type"] == "text_delta"]
    assert len(live) > 3, "the text came in pieces as the model wrote it"
    assert all(e["offset"] < len(steps) for e in live)
    assert not stats.fallback and stats.channels >= 1
    assert stats.queries == 0, "every item came from the worker's live channel"
    assert signals == 0, "no delta went through the history"
    assert updates == 1, "the only update is the approval (no poll)"
    assert [e["type"] for e in step_items(again)] == [e["type"] for e in steps]
    assert step_texts(again) == [FIRST, ANSWER]


async def test_reconnecting_reader_loses_no_step_event_across_a_worker_restart(
    client: Client, tmp_path: Path
):
    """Read part of a run, drop the reader, restart the worker (its live channel forgets
    everything), resume from the last offset: every step item comes, once, in order."""
    model = ScriptedModel(
        [tool_call("read_file", {"path": "README.md"}, content=FIRST), text(ANSWER)],
        chunk_chars=4,
    )
    async with Harness(client, tmp_path, model, live=WORKER_ADDRESS, live_secret=SECRET) as h:
        handle = await h.start("read it")
        first = await read_approving(
            run_events(client, handle.id, secret=SECRET),
            client,
            handle.id,
            until=lambda ev: ev["type"] == "tool_started",
        )
        await h.stop_worker()
        await h.start_worker()  # a new live channel, on a new port, that never saw this run
        last = first[-1]
        stats = ReaderStats()
        rest = await read_after(client, handle.id, last, stats)
        res = await handle.result()
        full = [ev async for ev in rc.follow(client, handle.id)]  # the stream's own record
    assert res.status == "completed"
    both = step_items(first) + step_items(rest)
    assert [e["offset"] for e in both] == list(range(len(both)))
    assert [(e["type"], e["offset"]) for e in both] == [(e["type"], e["offset"]) for e in full]
    assert step_texts(first + rest) == [FIRST, ANSWER]
    assert both[-1]["type"] == "run_finished"
    assert stats.queries >= 1, "what the new worker never saw came from the stream"


async def test_console_on_another_address_streams_the_workers_deltas(
    client: Client, tmp_path: Path
):
    model = ScriptedModel(approval_first(ANSWER), chunk_chars=3)
    async with Harness(client, tmp_path, model, live=WORKER_ADDRESS, live_secret=SECRET) as h:
        runner, url = await start_server(
            client, "127.0.0.1", 0, lambda r: f"http://ui/{r}", auth=AUTH, live_secret=SECRET
        )
        try:
            assert url.split(":")[1] != h.live.url.split(":")[1]
            run_id = (await h.start("answer")).id
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            async with (
                aiohttp.ClientSession(headers=bearer) as http,
                http.get(f"{url}/runs/{run_id}/events") as resp,
            ):
                msgs = await read_sse_approving(resp, client, run_id)
            # the worker's channel refuses a reader without a token for the run
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"{h.live.url}/live/{run_id}") as bare,
            ):
                refused = bare.status
            other = {"Authorization": f"Bearer {sign_token(SECRET, 'another-run')}"}
            forged = {"Authorization": f"Bearer {sign_token(b'not-the-secret', run_id)}"}
            async with aiohttp.ClientSession() as http:
                for headers in (other, forged):
                    async with http.get(f"{h.live.url}/live/{run_id}", headers=headers) as r:
                        assert r.status == 401
        finally:
            await runner.cleanup()
        signals, updates = await counts(client, run_id)
    evs = events_of(msgs)
    assert msgs[-1][1] == "end" and evs[-1]["type"] == "run_finished"
    assert step_texts(evs) == ["", ANSWER]
    live_ids = [i for i, e, d in msgs if e == "message" and '"live": true' in d]
    assert len(live_ids) > 3 and all(i is not None and "." in i for i in live_ids)
    assert refused == 401
    assert (signals, updates) == (0, 1)  # the approval's update, no poll


async def test_live_reader_falls_back_to_the_stream_without_a_channel(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([text(ANSWER)])
    async with Harness(client, tmp_path, model) as h:  # a worker without a live channel
        handle = await h.start("answer")
        # the reader tells "no worker has a channel" from "no worker polls yet" (then the
        # history names those that come) by the queue's pollers: wait until this one shows
        for _ in range(100):
            if await live_reader._pollers(client, h.task_queue) is not None:
                break
            await asyncio.sleep(0.1)
        stats = ReaderStats()
        evs = [ev async for ev in run_events(client, handle.id, secret=SECRET, stats=stats)]
        await asyncio.wait_for(handle.result(), 30)
    assert stats.fallback
    assert evs[-1]["type"] == "run_finished" and step_texts(evs) == [ANSWER]


LONG = (
    "Watching survives a crash: this reply is written slowly, in small pieces, so that the "
    "worker can be killed while the text is still arriving at the reader."
)


async def test_worker_killed_mid_stream_gives_model_retry_then_the_right_text(
    client: Client, dev_server_address: str, tmp_path: Path, monkeypatch
):
    """Worker processes with their default live channel; the first is SIGKILLed mid-reply."""
    monkeypatch.setenv("AGENT_LIVE_SECRET", SECRET.decode())
    monkeypatch.setenv("AGENT_LIVE_ADDRESS", "127.0.0.2:0")
    model = ScriptedModel(
        [*approval_first(LONG)[:1], text(LONG).with_chunk_delay(0.05), text(LONG)], chunk_chars=3
    )
    stats = ReaderStats()
    async with Harness(client, tmp_path, model, worker=False) as h:
        # mid-stream, at the first live delta: the process is gone
        res, events = await watched_through_a_crash(
            h,
            dev_server_address,
            tmp_path / "worker.log",
            lambda run_id: run_events(client, run_id, secret=SECRET, stats=stats),
            lambda ev: ev["type"] == "text_delta" and bool(ev.get("live")),
        )
    assert res.status == "completed" and res.output == LONG
    assert not stats.fallback
    retries = [e for e in events if e["type"] == "model_retry"]
    assert len(retries) == 1
    before = "".join(
        e["delta"] for e in events[: events.index(retries[0])] if e["type"] == "text_delta"
    )
    assert before and LONG.startswith(before) and before != LONG  # partial text, then void
    assert step_texts(events) == ["", LONG]
    steps = step_items(events)
    assert [e["offset"] for e in steps] == list(range(len(steps)))


async def test_live_reader_follows_continue_as_new(client: Client, tmp_path: Path):
    texts, model, agents = chain_of_turns(10)
    async with Harness(
        client, tmp_path, model, agents=agents, live=WORKER_ADDRESS, live_secret=SECRET
    ) as h:
        handle = await h.start("a long one")
        stats = ReaderStats()
        seen = [ev async for ev in run_events(client, handle.id, secret=SECRET, stats=stats)]
        res = await handle.result()
        desc = await client.get_workflow_handle(handle.id).describe()
    assert res.status == "completed"
    assert desc.run_id != handle.first_execution_run_id, "the run should have continued as new"
    steps = step_items(seen)
    assert [e["offset"] for e in steps] == list(range(len(steps)))
    assert step_texts(seen) == [*texts, "all done"]
    assert not stats.fallback


async def test_reader_dropped_mid_reply_resumes_without_repeating_or_losing_text(
    client: Client, tmp_path: Path
):
    model = ScriptedModel(approval_first(ANSWER), chunk_chars=3)
    async with Harness(client, tmp_path, model, live=WORKER_ADDRESS, live_secret=SECRET) as h:
        handle = await h.start("answer")
        first = await read_approving(
            run_events(client, handle.id, secret=SECRET),
            client,
            handle.id,
            # the connection drops in the middle of the reply
            until=lambda ev: bool(ev.get("live")) and ev.get("chars", 0) > 20,
        )
        await asyncio.sleep(0.3)  # the model goes on writing meanwhile
        last, stats = first[-1], ReaderStats()
        rest = await read_after(client, handle.id, last, stats)
        await handle.result()
    assert step_texts(first + rest) == ["", ANSWER]
    assert any(e.get("live") for e in rest), "the rest of the reply came live"
    steps = step_items(first + rest)
    assert [e["offset"] for e in steps] == list(range(len(steps)))
    assert stats.queries == 0, "the worker's channel had everything from the last offset"


async def test_a_channel_out_of_reach_still_gives_every_step_event(client: Client, tmp_path: Path):
    """The worker advertises an address nobody answers at: the stream's queries give it all."""
    model = ScriptedModel(approval_first(ANSWER), chunk_chars=3)
    async with Harness(
        client,
        tmp_path,
        model,
        live=WORKER_ADDRESS,
        live_secret=SECRET,
        live_advertise="127.0.0.1:9",  # discard port: refused
    ) as h:
        handle = await h.start("deploy and answer")
        stats = ReaderStats()
        items = run_events(client, handle.id, secret=SECRET, stats=stats)
        events = await read_approving(items, client, handle.id)
        await handle.result()
        full = [ev async for ev in rc.follow(client, handle.id)]
    assert not stats.fallback and stats.queries >= 1
    assert [(e["type"], e["offset"]) for e in events] == [(e["type"], e["offset"]) for e in full]
    assert step_texts(events) == ["", ANSWER]


async def test_output_guardrails_keep_a_watched_steps_text_whole(client: Client, tmp_path: Path):
    """Text an ``output`` guardrail checks is never sent live, even to a channel's watcher."""
    card = "4111 1111 1111 1111"
    model = ScriptedModel(approval_first(f"Your card is {card}."), chunk_chars=3)
    agents = {"default": {"guardrails": {"output": ["pii"]}}}
    async with Harness(
        client, tmp_path, model, agents=agents, live=WORKER_ADDRESS, live_secret=SECRET
    ) as h:
        handle = await h.start("what is my card?")
        events = await read_approving(
            run_events(client, handle.id, secret=SECRET), client, handle.id
        )
        res = await handle.result()
    assert res.output == "Your card is [REDACTED]."
    assert not [e for e in events if e.get("live")]
    assert model.requests[-1].body.get("stream") is not True
    assert step_texts(events) == ["", res.output]


async def test_a_held_calls_result_comes_live_before_the_steps_text_and_once(
    client: Client, tmp_path: Path
):
    """A local tool's call held for the next model step: its ``tool_finished`` comes from the
    step's worker before the model is asked (live), and the workflow's own is not given again."""
    script = [
        *approval_first("unused")[:1],  # the reader approves: it surely watches from then on
        tool_call("calculator", {"expression": "6*7"}),
        text(ANSWER).with_chunk_delay(0.03),
    ]
    model = ScriptedModel(script, chunk_chars=3)
    async with Harness(client, tmp_path, model, live=WORKER_ADDRESS, live_secret=SECRET) as h:
        handle = await h.start("deploy, then multiply")
        events = await read_approving(
            run_events(client, handle.id, secret=SECRET), client, handle.id
        )
        res = await handle.result()
    assert res.status == "completed" and [c.name for c in res.tool_calls] == [
        "deploy",
        "calculator",
    ]
    calc = res.tool_calls[1].id
    finished = [e for e in events if e["type"] == "tool_finished"]
    assert [e["tool_call_id"] for e in finished] == [res.tool_calls[0].id, calc]  # once each
    fin = finished[1]
    assert fin.get("live") and (fin["result"], fin["status"]) == ("42", "ok")
    texts = [i for i, e in enumerate(events) if e["type"] == "text_delta" and e.get("turn") == 3]
    assert texts and events.index(fin) < texts[0]  # the result before the step's text
    assert step_texts(events)[-1] == ANSWER
