"""Runs of any length: continue-as-new, budgets, compaction in a real run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client

from activities.contracts import MODEL_COMPLETE, TOKENS_COUNT, CountTokensInput
from activities.rules import token_upper_bound
from activities.spec_agent import PinnedSpec
from activities.tokens import count_messages
from tests.support.harness import Harness, until_state
from tests.support.tools import journal_events
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workflows.models import RaiseBudgetSignal, RunState


async def test_continue_as_new_keeps_state_queries_and_approvals_working(
    client: Client, tmp_path: Path
):
    script = [tool_call("record", {"label": str(i)}) for i in range(5)]
    script += [tool_call("deploy", {"target": "prod"}), text("all done")]
    model = ScriptedModel(script)
    agents = {"default": {"limits": {"continue_as_new_every_turns": 2, "max_turns": 20}}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("many turns")
        st = await until_state(handle, lambda s: s.status == "awaiting_approval", timeout=30)
        assert st.continued_runs >= 2  # the approval waits in a later run of the chain
        assert st.turn == 6
        assert len(st.tool_calls) == 6  # the record of earlier runs was carried over
        desc = await handle.describe()
        assert desc.run_id != handle.result_run_id  # a later run of the same workflow id answers
        await rc.decide(
            client, handle.id, st.pending_approvals[0].tool_call_id, "approve", "anyone"
        )
        res = await handle.result()
    assert res.status == "completed"
    assert res.turns == 7
    assert [e.get("label") or e.get("target") for e in journal_events(h.journal)] == [
        "0",
        "1",
        "2",
        "3",
        "4",
        "prod",
    ]
    # every model step saw the whole transcript, across the boundaries
    assert len(model.requests[-1].messages) == 2 + 6 * 2
    # usage was carried across the boundaries, not restarted in each run of the chain
    assert res.usage.total_tokens > st.usage.total_tokens > 0
    assert st.usage.prompt_tokens >= sum(len(r.messages) for r in model.requests[:6])


async def test_token_budget_ends_the_run(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("record", {"label": str(i)}) for i in range(20)])
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("spend", limits={"max_total_tokens": 60})
    assert res.status == "budget_exceeded"
    assert res.usage.total_tokens >= 60
    assert "budget of 60" in res.stopped_reason
    assert res.turns < 20


async def test_cost_budget_can_pause_until_raised(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [tool_call("record", {"label": "a"}), tool_call("record", {"label": "b"}), text("done")]
    )
    agents = {
        "default": {
            "pricing": {"prompt_per_mtok": 1000.0, "completion_per_mtok": 1000.0},
            "limits": {"max_cost_usd": 0.01, "on_budget": "pause"},
        }
    }
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("spend money")
        st = await until_state(handle, lambda s: s.status == "budget_paused")
        assert st.usage.cost_usd >= 0.01
        await asyncio.sleep(0.5)
        assert model.count == 1
        await handle.signal(
            "raise_budget", RaiseBudgetSignal(principal_id="boss", max_cost_usd=10.0)
        )
        res = await handle.result()
    assert res.status == "completed"
    assert model.count == 3
    assert res.usage.cost_usd > 0.01


async def test_transcript_over_the_window_never_reaches_the_model(client: Client, tmp_path: Path):
    big = "word " * 3000  # ~3,000 tokens per tool result
    script = [tool_call("slow_echo", {"text": big + str(i), "seconds": 0}) for i in range(6)] + [
        text("done")
    ]
    model = ScriptedModel(script)
    agents = {
        "default": {
            "compaction": {"context_window": 8000, "output_reserve": 500, "threshold": 0.8},
            "max_tool_output_chars": 20000,
        }
    }
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("read a lot")
        res = await handle.result()
        st: RunState = await handle.query("state", result_type=RunState)
    assert res.status == "completed"
    assert st.compactions >= 1
    from activities.tokens import count_messages

    for r in model.requests:
        counts = count_messages(r.messages, r.tools, "scripted")
        assert counts.total <= 8000 - 500, counts.total
        assert r.messages[0]["role"] == "system"
        ids = {c["id"] for m in r.messages for c in (m.get("tool_calls") or [])}
        assert all(m["tool_call_id"] in ids for m in r.messages if m["role"] == "tool")


async def test_compaction_with_a_summary_written_by_a_model_step(client: Client, tmp_path: Path):
    big = "word " * 3000
    steps = {"n": 0}

    def responder(req: dict):
        if not req.get("tools"):  # the summary step is sent without tools
            return text("SUMMARY: echoed big texts 0.. so far")
        steps["n"] += 1
        if steps["n"] <= 6:
            return tool_call("slow_echo", {"text": big + str(steps["n"]), "seconds": 0})
        return text("done")

    model = ScriptedModel(responder=responder)
    agents = {
        "default": {
            "compaction": {
                "context_window": 8000,
                "output_reserve": 500,
                "threshold": 0.8,
                "summarize": True,
            },
            "max_tool_output_chars": 20000,
        }
    }
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("read a lot")
        res = await handle.result()
        transcript = await handle.query("transcript")
    assert res.status == "completed"
    summary_requests = [r for r in model.requests if not r.tools]
    assert summary_requests, "no summary step ran"
    assert (
        "word word" in summary_requests[0].messages[-1]["content"]
    )  # it was given the dropped text
    summaries = [m for m in transcript if "SUMMARY: echoed" in str(m.get("content"))]
    assert len(summaries) >= 1 and transcript[0]["role"] == "system"


async def test_tokens_are_counted_once_per_message_between_compactions(
    client: Client, tmp_path: Path
):
    """Near the compaction budget, each model step counts only the messages added since the last
    count (not the whole transcript), and the bound skips counting while far under it."""
    turns = 14
    script = [
        tool_call("slow_echo", {"text": "word " * 100 + str(i), "seconds": 0}) for i in range(turns)
    ] + [text("done")]
    model = ScriptedModel(script)
    agents = {
        "default": {
            "compaction": {"context_window": 8000, "output_reserve": 500, "threshold": 0.8},
        }
    }
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("echo a lot")
        res = await handle.result()
        st: RunState = await handle.query("state", result_type=RunState)
        transcript = await handle.query("transcript")
        history = await handle.fetch_history()
        inputs = []
        for e in history.events:
            a = e.activity_task_scheduled_event_attributes
            if e.HasField("activity_task_scheduled_event_attributes") and (
                a.activity_type.name == TOKENS_COUNT
            ):
                [inp] = await client.data_converter.decode(a.input.payloads, [CountTokensInput])
                inputs.append(inp)
    assert res.status == "completed" and res.turns == turns + 1
    assert st.compactions == 0  # about 150 tokens a turn: far from 6,000 in 15 turns
    assert 2 <= len(inputs) < turns  # not before the bound reached the budget
    first, rest = inputs[0], inputs[1:]
    assert first.messages[0]["role"] == "system"  # the first counts every message
    for inp in rest:  # then only what the turns since the last count added: calls and results
        roles = [m["role"] for m in inp.messages]
        assert roles and roles == ["assistant", "tool"] * (len(roles) // 2)
    # the schemas were counted once: with the spec (their bound is over half the budget)
    assert all(inp.tools == [] for inp in inputs)
    # every message was counted once and in order: the inputs put together are the transcript
    counted = [m for i in inputs for m in i.messages]
    assert len(first.messages) < len(counted) <= len(transcript)
    assert counted == transcript[: len(counted)]


async def test_a_default_agents_tool_schemas_are_counted_with_its_spec(
    client: Client, tmp_path: Path
):
    """The shipped ``default`` agent's five tool schemas bound over half its compaction budget:
    they are counted when the spec is pinned, so a short run schedules no ``tokens.count``."""
    model = ScriptedModel([tool_call("calculator", {"expression": "6*7"}), text("42")])
    tools = ["list_files", "read_file", "search_files", "calculator", "write_file"]
    compaction = {"context_window": 8192, "output_reserve": 512}  # agents/agents.yml
    agents = {"default": {"tools": tools, "compaction": compaction}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("what is 6*7?")
        assert (await handle.result()).status == "completed"
        history = await handle.fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert TOKENS_COUNT not in scheduled and MODEL_COMPLETE in scheduled
    [pinned] = [
        p
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
        and "result" in e.marker_recorded_event_attributes.details
        for p in await client.data_converter.decode(
            e.marker_recorded_event_attributes.details["result"].payloads, [PinnedSpec]
        )
        if isinstance(p, PinnedSpec)
    ]
    schemas = [t.openai_schema() for t in pinned.tools]
    budget = pinned.spec.compaction.budget_tokens()
    assert sum(token_upper_bound(s) for s in schemas) > budget  # the bound alone would count
    assert pinned.tools_tokens == count_messages([], schemas, pinned.spec.model).tools
