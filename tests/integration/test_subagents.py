"""Sub-agents as child runs (``ask_<NAME>``): concurrency, usage roll-up, interrupt, approvals."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

import workers.client as rc
from tests.support.harness import Harness
from tests.support.subagents import AGENTS, after_tools, by_agent, usage_of
from workers.testing.scripted_model import (
    RecordedRequest,
    ScriptedModel,
    text,
    tool_call,
    tool_calls,
)
from workflows.models import RunResult, RunState
from workflows.state import SA_PRINCIPAL, SA_STATUS, SA_TENANT


def tool_results(req: dict[str, Any]) -> str:
    return " | ".join(str(m.get("content")) for m in req["messages"] if m.get("role") == "tool")


def marker_of(r: RecordedRequest) -> str:
    return str(r.messages[0].get("content"))


async def until(cond: Callable[[], Any], timeout: float = 30.0) -> Any:
    for _ in range(int(timeout / 0.05)):
        got = await cond()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


ASK_BOTH = tool_calls(
    [("ask_reader", {"task": "read README.md"}), ("ask_writer", {"task": "draft a note"})]
)


async def test_parent_asks_two_subagents_in_one_turn(client: Client, tmp_path: Path):
    model = ScriptedModel(
        responder=by_agent(
            {
                "[boss]": after_tools(ASK_BOTH, lambda r: text("both: " + tool_results(r))),
                "[reader]": lambda r: text("the answer is 42").with_delay(0.5),
                "[writer]": lambda r: text("a short note").with_delay(0.5),
            }
        )
    )
    async with Harness(client, tmp_path, model, agents=AGENTS) as h:
        handle = await h.start("[boss] work", agent="boss", tenant_id="acme", principal_id="bob")
        res = await asyncio.wait_for(handle.result(), timeout=60)
        kids = {
            c.agent: await client.get_workflow_handle(c.run_id, result_type=RunResult).result()
            for c in res.children
        }
        described = await client.get_workflow_handle(f"{handle.id}.reader-1").describe()
    assert res.status == "completed", res
    assert res.output == "both: the answer is 42 | a short note"
    assert [(c.run_id, c.agent, c.status) for c in res.children] == [
        (f"{handle.id}.reader-1", "reader", "completed"),
        (f"{handle.id}.writer-1", "writer", "completed"),
    ]
    assert [(c.name, c.status) for c in res.tool_calls] == [
        ("ask_reader", "ok"),
        ("ask_writer", "ok"),
    ]
    # the children ran at the same time: each was asked before the other answered
    child_reqs = [r for r in model.requests if "[boss]" not in marker_of(r)]
    assert len(child_reqs) == 2
    assert max(r.received_at for r in child_reqs) < min(r.replied_at or 0 for r in child_reqs)
    # usage adds up: the parent's is every model step's, its own and its children's
    for c in res.children:
        assert c.usage == kids[c.agent].usage and c.usage.total_tokens > 0
    assert res.usage.total_tokens == sum(usage_of(r) for r in model.requests)
    # children inherit tenant and principal, and name their parent
    reader = kids["reader"]
    assert reader.agent == "reader" and reader.status == "completed"
    sa = described.typed_search_attributes
    assert described.parent_id == handle.id  # Temporal's ParentWorkflowId / ParentRunId
    assert (sa.get(SA_TENANT), sa.get(SA_PRINCIPAL)) == ("acme", "bob")


async def test_interrupting_the_parent_ends_both_children(client: Client, tmp_path: Path):
    slow = tool_call("slow_echo", {"text": "x", "seconds": 60})
    model = ScriptedModel(
        responder=by_agent(
            {
                "[boss]": after_tools(ASK_BOTH, lambda r: text("never")),
                "[reader]": after_tools(slow, lambda r: text("never")),
                "[writer]": after_tools(slow, lambda r: text("never")),
            }
        )
    )
    agents = {**AGENTS, "writer": {**AGENTS["writer"], "policy": {"default": "allow"}}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("[boss] work", agent="boss")
        await until(lambda: _slow_calls(model, 2))
        await rc.interrupt(client, handle.id, "stop now", "bob")
        res = await asyncio.wait_for(handle.result(), timeout=60)
        kids = [
            await client.get_workflow_handle(c.run_id, result_type=RunResult).result()
            for c in res.children
        ]
    assert res.status == "interrupted"
    assert [k.status for k in kids] == ["interrupted", "interrupted"]
    assert [c.status for c in res.children] == ["interrupted", "interrupted"]
    assert res.usage.total_tokens == sum(usage_of(r) for r in model.requests)


async def _slow_calls(model: ScriptedModel, n: int) -> bool:
    return sum(1 for r in model.requests if r.reply and r.reply.tool_calls) >= n + 1


async def test_a_childs_approval_is_decided_through_the_parent(client: Client, tmp_path: Path):
    write = tool_call("write_file", {"path": "note.md", "content": "hello"})
    model = ScriptedModel(
        responder=by_agent(
            {
                "[boss]": after_tools(
                    tool_call("ask_writer", {"task": "write the note"}),
                    lambda r: text("parent saw: " + tool_results(r)),
                ),
                "[writer]": after_tools(write, lambda r: text("note written")),
            }
        )
    )
    async with Harness(client, tmp_path, model, agents=AGENTS) as h:
        handle = await h.start("[boss] work", agent="boss")

        async def pending() -> RunState | None:
            st = await handle.query("state", result_type=RunState)
            return st if st.pending_approvals else None

        st = await until(pending)
        [p] = st.pending_approvals
        assert p.run_id == f"{handle.id}.writer-1" and p.name == "write_file"
        # the parent waits on a child that waits for a person: it shows awaiting_approval
        assert st.status == "awaiting_approval"

        async def listed_waiting() -> bool:
            desc = await handle.describe()
            return desc.typed_search_attributes.get(SA_STATUS) == "awaiting_approval"

        await until(listed_waiting)
        # the writer's approvers are ["alice"]: the parent refuses anyone else at once
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await rc.decide(client, handle.id, p.tool_call_id, "approve", "mallory")
        assert "not among the approvers ['alice']" in str(refused.value.cause)
        await rc.decide(client, handle.id, p.tool_call_id, "approve", "alice")
        res = await asyncio.wait_for(handle.result(), timeout=60)
        child = await client.get_workflow_handle(p.run_id, result_type=RunResult).result()
        after = await handle.query("state", result_type=RunState)
    assert res.status == "completed", res
    assert res.output == "parent saw: note written"
    assert [(d.tool_call_id, d.decision, d.principal_id) for d in child.decisions] == [
        (p.tool_call_id, "approve", "alice")
    ]
    assert (h.workspace / "note.md").read_text() == "hello"
    assert after.pending_approvals == []
    assert after.status == "completed"


async def test_a_child_counts_against_the_parents_budget(client: Client, tmp_path: Path):
    wordy = tool_call("calculator", {"expression": "1+1"}, content="x" * 800)
    model = ScriptedModel(
        responder=by_agent(
            {
                "[boss]": after_tools(
                    tool_call("ask_reader", {"task": "think hard"}), lambda r: text("never")
                ),
                "[reader]": after_tools(wordy, lambda r: text("never")),
            }
        )
    )
    async with Harness(client, tmp_path, model, agents=AGENTS) as h:
        handle = await h.start("[boss] work", agent="boss", limits={"max_total_tokens": 150})
        res = await asyncio.wait_for(handle.result(), timeout=60)
        [kid] = res.children
        child = await client.get_workflow_handle(kid.run_id, result_type=RunResult).result()
        first = next(r for r in model.requests if "[boss]" in marker_of(r))
    assert child.status == "budget_exceeded"
    # the child's budget was what the parent had left after its first step
    assert f"of a budget of {150 - usage_of(first)}" in child.stopped_reason
    assert res.status == "budget_exceeded"
    assert res.tool_calls[0].status == "error"
    assert res.usage.total_tokens == sum(usage_of(r) for r in model.requests) > 150
