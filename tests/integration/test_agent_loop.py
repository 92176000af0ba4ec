"""The agent loop end to end: real dev server, scripted model over HTTP, real worker."""

from __future__ import annotations

import asyncio
import time

from tests.support.harness import Harness
from tests.support.tools import journal_events
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, error, text, tool_call, tool_calls
from workflows.models import RunState


async def test_tool_call_then_answer(client, tmp_path):
    model = ScriptedModel(
        [tool_call("read_file", {"path": "README.md"}), text("The answer is 42.")]
    )
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("what is the answer in README.md?")
    assert res.status == "completed"
    assert res.output == "The answer is 42."
    assert res.turns == 2
    assert [c.name for c in res.tool_calls] == ["read_file"]
    assert res.tool_calls[0].status == "ok"
    assert res.usage.total_tokens > 0
    # the model saw the tool result, in the OpenAI tool message format
    second = model.requests[1].messages
    assert second[-1]["role"] == "tool"
    assert "the answer is 42" in second[-1]["content"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "read_file"
    # and the tool schemas were sent
    names = {t["function"]["name"] for t in model.requests[0].tools}
    assert {"read_file", "calculator"} <= names


async def test_parallel_tool_calls_overlap_and_results_keep_call_order(client, tmp_path):
    model = ScriptedModel(
        [
            tool_calls(
                [
                    ("slow_echo", {"text": "first", "seconds": 1.0}),
                    ("slow_echo", {"text": "second", "seconds": 0.3}),
                ]
            ),
            text("both done"),
        ]
    )
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("echo twice")
    assert res.status == "completed"
    ev = {(e["text"], e["phase"]): e["t"] for e in journal_events(h.journal)}
    # the second call started before the first one finished: they ran concurrently
    assert ev[("second", "start")] < ev[("first", "end")]
    # results are appended in call order, not completion order
    tool_msgs = [m for m in model.requests[1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs] == ["echo: first", "echo: second"]


async def test_max_turns(client, tmp_path):
    model = ScriptedModel([tool_call("record", {"label": str(i)}) for i in range(10)])
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("keep going", limits={"max_turns": 3})
    assert res.status == "max_turns"
    assert res.turns == 3
    assert model.count == 3
    assert len(res.tool_calls) == 3


async def test_loop_detection_same_call(client, tmp_path):
    model = ScriptedModel([tool_call("record", {"label": "x"})] * 6)
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("loop")
    assert res.status == "loop_detected"
    assert "recurred 3 times" in res.stopped_reason
    # the third identical call is not run
    assert len([e for e in journal_events(h.journal) if e["tool"] == "record"]) == 2


async def test_loop_detection_alternation(client, tmp_path):
    a = tool_call("record", {"label": "a"})
    b = tool_call("calculator", {"expression": "1+1"})
    model = ScriptedModel([a, b, a, b, a, b])
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("alternate")
    assert res.status == "loop_detected"
    assert res.turns == 4
    assert "cycle of 2" in res.stopped_reason


async def test_tool_error_unknown_tool_and_invalid_arguments_reach_the_model(client, tmp_path):
    model = ScriptedModel(
        [
            tool_calls(
                [
                    ("fail_business", {"reason": "not today"}),
                    ("no_such_tool", {"x": 1}),
                    ("calculator", {"expr": "1+1"}),
                    ("read_file", "{not json"),
                ]
            ),
            text("I see the errors."),
        ]
    )
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("try things")
    assert res.status == "completed"
    msgs = {
        m["tool_call_id"]: m["content"] for m in model.requests[1].messages if m["role"] == "tool"
    }
    contents = list(msgs.values())
    assert "refused: not today" in contents[0]
    assert (
        "no_such_tool" in contents[1] and "calculator" in contents[1]
    )  # names the available tools
    assert "expression" in contents[2]  # says which argument was wrong/missing
    assert "JSON" in contents[3]
    assert [c.status for c in res.tool_calls] == ["error", "error", "error", "error"]


async def test_rate_limit_then_success_honours_retry_after(client, tmp_path):
    model = ScriptedModel([error(429, headers={"retry-after": "2"}), text("ok after waiting")])
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("hello")
    assert res.status == "completed"
    assert res.output == "ok after waiting"
    first, second = model.requests
    # Temporal's first retry interval is 1 s; the server's retry-after of 2 s was honoured
    assert first.replied_at is not None and second.received_at - first.replied_at >= 1.8


async def test_unauthorised_ends_failed_with_the_servers_message(client, tmp_path):
    model = ScriptedModel(
        [
            error(
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided",
                        "type": "invalid_request_error",
                    }
                },
            )
        ]
    )
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("hello")
    assert res.status == "failed"
    assert "Incorrect API key provided" in (res.error or "")
    assert "401" in (res.error or "")
    assert model.count == 1  # not retried


async def test_unparsable_model_output_is_retried_then_reported_to_the_model(client, tmp_path):
    bad = error(
        500, {"error": {"message": "Failed to parse tool call: does not match the expected format"}}
    )
    model = ScriptedModel([bad, bad, bad, text("plain answer")])
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("hello")
    assert res.status == "completed"
    assert model.count == 4  # three attempts of the first step, then a new step
    last = model.requests[3].messages[-1]
    assert last["role"] == "user" and "could not be read as a tool call" in last["content"]


async def test_unparsable_output_forever_ends_the_run_cleanly(client, tmp_path):
    bad = error(500, {"error": {"message": "does not match the expected format"}})
    model = ScriptedModel(default=bad)
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("hello")
    assert res.status == "failed"
    assert "could not be parsed" in res.stopped_reason
    assert model.count == 9  # 3 steps of 3 attempts: bounded, no crash loop


async def test_invalid_spec_ends_failed_naming_the_field(client, tmp_path):
    model = ScriptedModel([text("unused")])
    async with Harness(
        client, tmp_path, model, agents={"default": {}, "broken": {"limits": {"max_turns": 0}}}
    ) as h:
        res = await h.run("hello", agent="broken")
        res2 = await h.run("hello", agent="nobody")
    assert res.status == "failed"
    assert "agents.broken.limits.max_turns" in (res.error or "")
    assert res2.status == "failed" and "unknown agent 'nobody'" in (res2.error or "")
    assert model.count == 0


async def test_spec_is_pinned_at_start(client, tmp_path):
    model = ScriptedModel([tool_call("slow_echo", {"text": "t", "seconds": 1.0}), text("done")])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("hello")
        await _wait_for(lambda: len(journal_events(h.journal)) >= 1)
        h.spec_file.write_text("agents: {default: {system_prompt: CHANGED, tools: []}}")
        res = await handle.result()
    assert res.status == "completed"
    assert model.requests[1].messages[0]["content"] == "You are a test agent."
    assert len(model.requests[1].tools) > 0
    assert len(res.spec_hash) == 64


async def _wait_for(cond, timeout: float = 20.0) -> None:
    import asyncio

    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


async def test_max_seconds_ends_a_slow_model_step_with_timeout(client, tmp_path):
    model = ScriptedModel([tool_call("record", {"label": "one"}), text("too late", delay=30)])
    async with Harness(client, tmp_path, model) as h:
        started = time.monotonic()
        res = await h.run("be quick", limits={"max_seconds": 3})
        elapsed = time.monotonic() - started
    assert res.status == "timeout"
    assert res.stopped_reason == "reached max_seconds"
    assert elapsed < 20  # the 30 s model step was cancelled, not awaited
    assert res.output is None  # the late answer never reached the run
    assert [c.status for c in res.tool_calls] == ["ok"]  # the work so far is kept


async def test_max_seconds_ends_a_slow_tool_call_with_timeout(client, tmp_path):
    model = ScriptedModel([tool_call("slow_echo", {"text": "x", "seconds": 30}), text("never")])
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("wait", limits={"max_seconds": 2})
    assert res.status == "timeout"
    assert [c.status for c in res.tool_calls] == ["cancelled"]
    assert model.count == 1


async def test_time_waiting_for_approval_does_not_count_toward_max_seconds(client, tmp_path):
    """max_seconds counts the run's own time: a 4 s wait for a person does not use up 3 s."""
    agents = {"default": {"policy": {"approvers": ["alice"]}}}
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}), text("deployed")])
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("deploy", limits={"max_seconds": 3})
        for _ in range(200):
            st = await handle.query("state", result_type=RunState)
            if st.status == "awaiting_approval":
                break
            await asyncio.sleep(0.05)
        assert st.status == "awaiting_approval"
        await asyncio.sleep(4)
        await rc.decide(client, handle.id, st.pending_approvals[0].tool_call_id, "approve", "alice")
        res = await asyncio.wait_for(handle.result(), timeout=30)
    assert res.status == "completed", res.stopped_reason
    assert res.output == "deployed"
    assert [c.status for c in res.tool_calls] == ["ok"]
