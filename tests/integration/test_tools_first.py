"""Local tools' calls riding the next model step (workflows/model_step.py, ToolsFirst), and when they don't.

Real dev server, scripted model, the worker's real tool registry. What the model was sent is read
from the scripted model's request log; where a call ran, from the run's history.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHistory

from activities.contracts import model_task_queue
from tests.support.harness import TEST_TOOLS, Harness
from tests.support.tools import journal_events
from workers import client as rc
from workers import history as ih
from workers.testing.scripted_model import ScriptedModel, error, text, tool_call
from workflows.models import RunState

CALC = tool_call("calculator", {"expression": "6*7"})


def scheduled(history: WorkflowHistory) -> list[tuple[str, dict[str, Any]]]:
    """(activity type, input) of every activity the run scheduled, in order."""
    out = []
    for ev in history.events:
        if ev.HasField("activity_task_scheduled_event_attributes"):
            a = ev.activity_task_scheduled_event_attributes
            out.append((a.activity_type.name, json.loads(a.input.payloads[0].data)))
    return out


def local_activities(history: WorkflowHistory) -> list[str]:
    """Activity types of the run's local activities (their markers), in order."""
    out = []
    for ev in history.events:
        a = ev.marker_recorded_event_attributes
        if ev.HasField("marker_recorded_event_attributes") and "data" in a.details:
            out.append(json.loads(a.details["data"].payloads[0].data)["activity_type"])
    return out


def tool_messages(model: ScriptedModel, index: int) -> list[str]:
    return [m["content"] for m in model.requests[index].messages if m.get("role") == "tool"]


async def test_a_model_on_its_own_queue_gets_the_calls_run_first_as_local_activities(
    client: Client, tmp_path: Path
):
    """A rate-limited model's queue has workers without tools: the held call runs here first."""
    model = ScriptedModel([CALC, text("42")])
    top = {"rate_limits": {"limited": {"requests_per_second": 50}}}
    agents = {"default": {"model": "limited"}}
    async with Harness(client, tmp_path, model, agents=agents, top=top) as h:  # + model workers
        handle = await h.start("multiply")
        res = await asyncio.wait_for(handle.result(), timeout=60)
        history = await ih.fetch_history(client, handle.id)
    assert res.status == "completed", res.stopped_reason
    assert [(c.name, c.status) for c in res.tool_calls] == [("calculator", "ok")]
    assert tool_messages(model, 1) == ["42"]
    assert local_activities(history) == ["spec.resolve", "tool.invoke"]
    steps = scheduled(history)
    assert [kind for kind, _ in steps] == ["model.complete", "model.complete"]
    assert all(not inp.get("tools_first") for _, inp in steps)
    queues = {
        ev.activity_task_scheduled_event_attributes.task_queue.name
        for ev in history.events
        if ev.HasField("activity_task_scheduled_event_attributes")
    }
    assert queues == {model_task_queue(h.task_queue, "limited")}


async def test_the_last_turn_runs_its_call_before_the_run_stops(client: Client, tmp_path: Path):
    """max_turns reached after the call: no model step follows, so the call is not held."""
    model = ScriptedModel([CALC, text("never asked")])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("multiply", limits={"max_turns": 1})
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
    assert res.status == "max_turns"
    assert [(c.name, c.status) for c in res.tool_calls] == [("calculator", "ok")]
    assert local_activities(history) == ["spec.resolve", "tool.invoke"]
    assert model.count == 1


async def test_held_calls_run_before_continue_as_new(client: Client, tmp_path: Path):
    """The next execution starts with every result written (no held call crosses it)."""
    model = ScriptedModel([CALC, CALC, text("done")])
    agents = {"default": {"limits": {"continue_as_new_every_turns": 1}}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("multiply twice")
        res = await handle.result()
        transcript = await handle.query("transcript")
        state: RunState = await handle.query("state", result_type=RunState)
    assert res.status == "completed", res.stopped_reason
    assert state.continued_runs == 2
    assert [c.status for c in res.tool_calls] == ["ok", "ok"]
    assert [m["content"] for m in transcript if m["role"] == "tool"] == ["42", "42"]
    assert [len(tool_messages(model, i)) for i in range(3)] == [0, 1, 2]
    assert all(c == "42" for i in range(3) for c in tool_messages(model, i))


async def test_big_results_of_held_calls_go_through_compaction_before_the_model(
    client: Client, tmp_path: Path
):
    """A step whose filled transcript may be over the budget returns without asking the model."""

    asked = {"n": 0}

    def responder(req: dict[str, Any]) -> Any:
        if not req.get("tools"):  # the compaction summary step
            return text("SUMMARY: echoed big texts so far")
        asked["n"] += 1
        n = asked["n"]
        return tool_call("big_output", {"chars": 12_000 + n}) if n <= 4 else text("ok")

    model = ScriptedModel(responder=responder)
    agents = {
        "default": {
            "tools": [{"name": "big_output", "local": True}],  # short arguments, long results
            "compaction": {"context_window": 8000, "output_reserve": 500, "threshold": 0.8},
            "max_tool_output_chars": 20000,
        }
    }
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("echo a lot")
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
        points = ih.fork_points(await ih.fetch_chain(client, handle.id))
    assert res.status == "completed", res.stopped_reason
    assert all(c.status == "ok" for c in res.tool_calls)
    from activities.tokens import count_messages

    for r in model.requests:  # no request over the window, and every result filled in
        assert count_messages(r.messages, r.tools, "scripted").total <= 8000 - 500
        assert all(m["content"] for m in r.messages if m["role"] == "tool")
    replies = [
        json.loads(ev.activity_task_completed_event_attributes.result.payloads[0].data)
        for ev in history.events
        if ev.HasField("activity_task_completed_event_attributes")
    ]
    skipped = [r for r in replies if r.get("model_skipped")]
    assert skipped and all(r["tool_outcomes"] and r["usage"]["total_tokens"] == 0 for r in skipped)
    # a fork at any turn starts from what the model saw then (not from a skipped step)
    assert [points[turn] for turn in sorted(points)] == [
        r.messages for r in model.requests if r.tools
    ]
    # the turn the skipped step would have been is not counted twice
    assert res.turns == sum(1 for r in replies if "tool_calls" in r and not r.get("model_skipped"))


async def test_an_interrupt_while_a_held_call_runs_cancels_it(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("slow_echo", {"text": "x", "seconds": 30}), text("never")])
    agents = {"default": {"tools": [{"name": "slow_echo", "local": True}]}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("wait")
        await asyncio.sleep(1.5)
        await rc.interrupt(client, handle.id, "anonymous", "enough")
        res = await asyncio.wait_for(handle.result(), timeout=30)
        transcript = await handle.query("transcript")
    assert res.status == "interrupted"
    assert [c.status for c in res.tool_calls] == ["cancelled"]
    (msg,) = [m for m in transcript if m["role"] == "tool"]
    assert msg["content"].startswith("The tool call was cancelled")
    assert model.count == 1


@pytest.fixture
def spec_secret(monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A variable name this process has never redacted, and its secret value."""
    name, value = f"TEST_SECRET_{secrets.token_hex(4).upper()}", "tok-" + secrets.token_hex(16)
    monkeypatch.setenv(name, value)
    return name, value


async def test_a_spec_secret_in_a_held_calls_output_is_redacted_everywhere(
    client: Client, tmp_path: Path, spec_secret: tuple[str, str]
):
    """The step's own input names no secrets: the call's (the spec's) redact its output."""
    name, value = spec_secret
    model = ScriptedModel([tool_call("echo_env", {"name": name}), text("done")])
    agents = {"default": {"secrets": [name], "tools": [{"name": "echo_env", "local": True}]}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("tell me")
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
    assert res.status == "completed"
    assert tool_messages(model, 1) == [f"{name} is [REDACTED]"]
    assert scheduled(history)[1][1]["tools_first"]  # it rode the step
    raw = b"".join(ev.SerializeToString() for ev in history.events)
    assert value.encode() not in raw
    assert all(value not in json.dumps(r.body) for r in model.requests)


async def test_a_key_in_a_held_calls_exception_is_redacted(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    key = "sk-test-" + secrets.token_hex(18)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    model = ScriptedModel([tool_call("leak_in_exception", {}), text("done")])
    tools = [*TEST_TOOLS, {"name": "leak_in_exception", "local": True}]
    async with Harness(client, tmp_path, model, agents={"default": {"tools": tools}}) as h:
        handle = await h.start("go")
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
    (rec,) = res.tool_calls
    assert rec.status == "error" and "upstream refused key [REDACTED]" in (rec.reason or "")
    (msg,) = tool_messages(model, 1)
    assert msg == (
        "The tool failed and was given up after 2 attempt(s): "
        "RuntimeError: upstream refused key [REDACTED]"
    )
    raw = b"".join(ev.SerializeToString() for ev in history.events)
    assert key.encode() not in raw
    assert all(key not in json.dumps(r.body) for r in model.requests)


async def test_a_held_call_that_fails_once_is_retried_in_the_step_and_its_result_kept(
    client: Client, tmp_path: Path
):
    """The first attempt's failure goes to the retries (tenacity); the second attempt's result
    is the call's, and the model step is asked once for it (no retry of the step)."""
    model = ScriptedModel([tool_call("fails_once", {"label": "x"}), text("done")])
    tools = [*TEST_TOOLS, {"name": "fails_once", "local": True}]
    async with Harness(client, tmp_path, model, agents={"default": {"tools": tools}}) as h:
        handle = await h.start("go")
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
    assert res.status == "completed"
    assert [(c.name, c.status) for c in res.tool_calls] == [("fails_once", "ok")]
    assert tool_messages(model, 1) == ["x on attempt 2"]
    assert scheduled(history)[1][1]["tools_first"]  # it rode the step
    assert [e["tool"] for e in journal_events(tmp_path / "journal.jsonl")] == ["fails_once"] * 2
    assert model.count == 2


async def test_a_model_that_fails_for_good_after_the_calls_ran_loses_none_of_their_results(
    client: Client, tmp_path: Path
):
    """The step's failure carries the calls' outcomes; the run records them before it ends."""
    model = ScriptedModel([CALC, error(400)])  # 400: rejected, not retried, no fallback
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("multiply")
        res = await handle.result()
        transcript = await handle.query("transcript")
        history = await ih.fetch_history(client, handle.id)
    assert res.status == "failed" and res.stopped_reason == "model step failed"
    assert [(c.name, c.status) for c in res.tool_calls] == [("calculator", "ok")]
    assert [m["content"] for m in transcript if m["role"] == "tool"] == ["42"]
    assert scheduled(history)[1][1]["tools_first"]  # it rode the failed step
    assert model.count == 2


async def test_an_unparsable_reply_after_the_calls_ran_does_not_run_them_again(
    client: Client, tmp_path: Path
):
    """The model is told its output was unreadable; the calls' results are already recorded."""
    unreadable = error(500, "failed to parse tool call")  # llama.cpp's words (activities/model.py)
    model = ScriptedModel([CALC, unreadable, unreadable, unreadable, text("42")])
    agents = {"default": {"model_max_attempts": 3}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("multiply")
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
    assert res.status == "completed", res.stopped_reason
    assert [(c.name, c.status) for c in res.tool_calls] == [("calculator", "ok")]
    steps = scheduled(history)
    assert [bool(inp.get("tools_first")) for _, inp in steps] == [False, True, False]
    last = model.requests[-1].messages
    assert [m["content"] for m in last if m["role"] == "tool"] == ["42"]


async def test_a_watched_run_shows_the_held_results_before_the_steps_text(
    client: Client, tmp_path: Path
):
    """The step publishes the calls' tool_finished before it asks the model; the run does not
    emit them again (ModelReply.tool_events_published)."""
    model = ScriptedModel([CALC, text("the answer is 42").with_chunk_delay(0.02)], chunk_chars=5)
    async with Harness(client, tmp_path, model, worker=False) as h:
        handle = await h.start("multiply")
        # follow before a worker runs the first workflow task, so the run knows it is watched
        watching = asyncio.ensure_future(_collect(rc.follow(client, handle.id)))
        await asyncio.sleep(0.5)
        await h.start_worker()
        events = await asyncio.wait_for(watching, timeout=60)
        res = await handle.result()
    assert res.status == "completed"
    kinds = [(e["type"], e.get("turn")) for e in events]
    finished = [e for e in events if e["type"] == "tool_finished"]
    assert len(finished) == 1
    (fin,) = finished
    assert (fin["name"], fin["status"], fin["result"], fin["turn"]) == ("calculator", "ok", "42", 1)
    assert fin["tool_call_id"] == res.tool_calls[0].id
    at = kinds.index(("tool_finished", 1))
    assert kinds.index(("tool_started", 1)) < kinds.index(("model_started", 2)) < at
    assert at < kinds.index(("text_delta", 2))  # the result before the step's text


async def _collect(stream: Any) -> list[dict[str, Any]]:
    return [ev async for ev in stream]
