"""Durable timers, on the time-skipping test server: an approval that nobody gives in time."""

from __future__ import annotations

from pathlib import Path

import pytest_asyncio

from tests.support.harness import Harness
from tests.support.tools import journal_events
from workers.testing.env import start_time_skipping_env
from workers.testing.scripted_model import ScriptedModel, text, tool_call


@pytest_asyncio.fixture
async def ts_env():
    env = await start_time_skipping_env()
    try:
        yield env
    finally:
        await env.shutdown()


def _agents(on_timeout: str) -> dict:
    return {
        "default": {"policy": {"approval_timeout_seconds": 7200, "on_approval_timeout": on_timeout}}
    }


async def test_approval_timeout_rejects_the_call(ts_env, tmp_path: Path):
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}), text("nobody answered")])
    async with Harness(ts_env.client, tmp_path, model, agents=_agents("reject")) as h:
        res = await h.run("deploy")  # two hours of workflow time pass in moments
    assert res.status == "completed"
    assert res.tool_calls[0].status == "timed_out"
    assert [e for e in journal_events(h.journal) if e["tool"] == "deploy"] == []
    tool_msg = [m for m in model.requests[1].messages if m["role"] == "tool"][0]
    assert "No person approved" in tool_msg["content"]


async def test_approval_timeout_can_end_the_run(ts_env, tmp_path: Path):
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}), text("unused")])
    async with Harness(ts_env.client, tmp_path, model, agents=_agents("fail")) as h:
        res = await h.run("deploy")
    assert res.status == "failed"
    assert res.stopped_reason == "approval timed out"
    assert model.count == 1


async def test_chat_idle_timeout_completes_the_conversation(ts_env, tmp_path: Path):
    model = ScriptedModel(["hello"])
    async with Harness(
        ts_env.client, tmp_path, model, agents={"default": {"idle_timeout_seconds": 600}}
    ) as h:
        res = await h.run("hi", mode="chat")
    assert res.status == "completed"
    assert res.stopped_reason == "conversation idle timeout"
    assert res.output == "hello"
