"""What a run does when its model server stalls, never ends its reply or asks for 10,000 calls.

Against a real HTTP server taught each fault (tests/support/hostile_model.py). Before the limits
of activities/model_limits.py, a stalled step waited for its start-to-close timeout and failed
unnamed ("activity StartToClose timeout"), and a reply of 10,000 tool calls failed every workflow
task of its run.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from temporalio.client import Client

from activities.model_reply import MAX_TOOL_CALLS
from tests.support import hostile_model as hm
from tests.support.harness import Harness
from workers import client as rc
from workers.testing.scripted_model import text

FULL = "The answer is 42, as the README says."


async def _events(handle: Any) -> list[dict[str, Any]]:
    return (await handle.fetch_history()).to_json_dict()["events"]


def _failures(events: list[dict[str, Any]]) -> list[str]:
    """The failure messages of the model attempts: failed, timed out, or retried then started."""
    out: list[str] = []
    for e in events:
        attrs = next((v for k, v in e.items() if k.endswith("Attributes")), {})
        failure = attrs.get("failure") or attrs.get("lastFailure")
        if failure:
            out.append(json.dumps(failure))
    return out


async def test_a_stalled_stream_falls_back_to_the_next_model_naming_the_stall(
    client: Client, tmp_path: Path
):
    model = hm.HostileModel([hm.stall()], [text(FULL)])
    agents = {
        "default": {
            "model": ["primary", "fallback"],
            "model_max_attempts": 1,
            "model_timeout_seconds": 30,
        }
    }
    settings = {"model_idle_timeout_seconds": 0.5}
    async with Harness(client, tmp_path, model, agents, worker=False, settings=settings) as h:
        handle = await h.start("what is the answer?")
        # followed before a worker runs the first workflow task: the step is streamed
        watching = asyncio.ensure_future(_collect(rc.follow(client, handle.id)))
        await asyncio.sleep(0.5)
        await h.start_worker()
        res = await asyncio.wait_for(handle.result(), timeout=60)
        await asyncio.wait_for(watching, timeout=10)
        events = await _events(handle)
    assert res.status == "completed" and res.output == FULL
    assert [s["model"] for s in res.model_steps] == ["fallback"]
    assert [r.body["model"] for r in model.requests] == ["primary", "fallback"]
    assert all(r.body.get("stream") for r in model.requests)
    failures = _failures(events)
    assert len(failures) == 1 and "no chunk for 0.5 s" in failures[0], failures


async def test_a_plain_reply_that_never_ends_is_retried_with_a_named_reason(
    client: Client, tmp_path: Path
):
    model = hm.HostileModel([hm.trickle(0.2)], [text(FULL)])
    agents = {"default": {"model_timeout_seconds": 3, "model_max_attempts": 2}}
    async with Harness(client, tmp_path, model, agents) as h:
        handle = await h.start("what is the answer?")
        res = await asyncio.wait_for(handle.result(), timeout=60)
        events = await _events(handle)
    assert res.status == "completed" and res.output == FULL
    assert model.count == 2 and model.requests[0].body == model.requests[1].body
    failures = _failures(events)
    assert len(failures) == 1 and "did not finish its reply within 2.7 s" in failures[0], failures


async def test_a_reply_of_10000_tool_calls_is_told_to_the_model_not_a_failed_task(
    client: Client, tmp_path: Path
):
    model = hm.HostileModel([hm.many_calls(10_000)] * 3, [text(FULL)])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("record everything")
        res = await asyncio.wait_for(handle.result(), timeout=60)
        events = await _events(handle)
    assert res.status == "completed" and res.output == FULL
    assert not [e for e in events if e["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_FAILED"]
    assert not h.journal.exists() or not h.journal.read_text()  # no call of record ran
    # three attempts, then the workflow told the model its reply was unusable, and it answered
    assert model.count == 4
    told = model.requests[-1].body["messages"][-1]
    assert told["role"] == "user" and "could not be read" in told["content"]
    failures = _failures(events)
    assert failures and all(f"at most {MAX_TOOL_CALLS}" in f for f in failures), failures


async def _collect(stream: Any) -> list[dict[str, Any]]:
    return [ev async for ev in stream]
