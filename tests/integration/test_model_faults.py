"""What real model servers do (issue #19): replies cut off in transit, retries that must repeat
the same request. Against the scripted model, a real HTTP server taught the faults."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.support.harness import Harness
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, error, garbage, text

FULL = "The note is saved, all three lines of it, in notes.txt."


def _bodies(model: ScriptedModel) -> list[str]:
    return [json.dumps(r.body, sort_keys=True) for r in model.requests]


async def test_a_cut_off_plain_reply_is_retried_with_the_same_request(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([text(FULL).cut(60), text(FULL)])
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("save the note")
    assert res.status == "completed" and res.output == FULL
    bodies = _bodies(model)
    assert len(bodies) == 2 and bodies[0] == bodies[1]


async def test_a_cut_off_stream_is_retried_never_taken_as_the_answer(
    client: Client, tmp_path: Path
):
    # chunk 0 is the role, then 3 characters a chunk: the stream stops at "The note "
    model = ScriptedModel([text(FULL).cut(4), text(FULL)], chunk_chars=3)
    async with Harness(client, tmp_path, model, worker=False) as h:
        handle = await h.start("save the note")
        # follow before a worker runs the first workflow task, so the step is scheduled watched
        # (streamed); following after the worker started raced the first task
        watching = asyncio.ensure_future(_collect(rc.follow(client, handle.id)))
        await asyncio.sleep(0.5)
        await h.start_worker()
        events: list[dict[str, Any]] = await asyncio.wait_for(watching, timeout=60)
        res = await handle.result()
    assert res.status == "completed" and res.output == FULL
    assert [r.body.get("stream") for r in model.requests] == [True, True]
    retries = [e for e in events if e["type"] == "model_retry"]
    assert retries and "cut off" in retries[0]["error"]
    # the deltas of the step after its last model_retry add up to the whole answer
    last = max(i for i, e in enumerate(events) if e["type"] == "model_retry")
    assert "".join(e["delta"] for e in events[last:] if e["type"] == "text_delta") == FULL


async def test_a_step_whose_every_attempt_is_cut_fails_without_a_half_answer(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([text(FULL).cut(50)] * 2)
    agents = {"default": {"model_max_attempts": 2}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        res = await h.run("save the note")
    assert res.status == "failed"
    assert not res.output or FULL[:10] not in res.output
    assert "cut off" in (res.error or "") + (res.stopped_reason or "")
    assert model.count == 2


async def test_retries_after_rate_limits_and_5xx_send_the_same_request(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([error(429, headers={"retry-after": "0"}), error(503), text(FULL)])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("save the note")
        res = await handle.result()
    assert res.status == "completed" and res.output == FULL
    bodies = _bodies(model)
    assert len(bodies) == 3 and len(set(bodies)) == 1
    assert json.loads(bodies[0])["temperature"] == 0.2


async def test_a_higher_temperature_only_after_unreadable_output_and_only_when_asked(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([error(503), garbage("{not json"), text(FULL)])
    agents = {"default": {"retry_temperature_step": 0.3}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("save the note")
        res = await handle.result()
    assert res.status == "completed"
    temps = [r.body["temperature"] for r in model.requests]
    # after the 503: unchanged; after the unreadable reply: +0.3
    assert temps == [0.2, 0.2, 0.5]
    hist = json.dumps((await handle.fetch_history()).to_json_dict())
    assert "ModelOutputInvalid" in hist


async def _collect(stream: Any) -> list[dict[str, Any]]:
    return [ev async for ev in stream]
