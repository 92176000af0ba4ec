"""Handoffs, plan mode, continue-as-new with sub-agents, and a worker killed while children run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.support.harness import Harness, through_a_worker_crash
from tests.support.subagents import AGENTS, after_tools, by_agent, usage_of
from tests.support.tools import journal_events
from workers.testing.scripted_model import (
    RecordedRequest,
    Reply,
    ScriptedModel,
    error,
    text,
    tool_call,
    tool_calls,
)
from workflows.models import RunResult, RunState


def last_user(req: dict[str, Any]) -> str:
    users = [m for m in req["messages"] if m.get("role") == "user"]
    return str(users[-1]["content"]) if users else ""


def first_user(r: RecordedRequest) -> str:
    return str(next(m for m in r.messages if m.get("role") == "user")["content"])


async def test_handoff_continues_the_run_with_the_other_agent(client: Client, tmp_path: Path):
    agents = {
        **AGENTS,
        "triage": {"system_prompt": "You triage [triage].", "handoffs": ["reader"], "tools": []},
    }
    model = ScriptedModel(
        responder=by_agent(
            {
                "[triage]": lambda r: tool_call("handoff_to_reader", {"reason": "a file question"}),
                "[reader]": lambda r: text("reader here: 42"),
            }
        )
    )
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("what is the answer?", agent="triage")
        res = await asyncio.wait_for(handle.result(), timeout=60)
    assert res.status == "completed", res
    assert res.output == "reader here: 42"
    assert res.lineage == ["triage", "reader"]
    assert [(c.name, c.status) for c in res.tool_calls] == [("handoff_to_reader", "ok")]
    first, second = model.requests
    assert [t["function"]["name"] for t in first.tools] == ["handoff_to_reader"]
    assert "handoff_to_reader" not in [t["function"]["name"] for t in second.tools]
    assert "read_file" in [t["function"]["name"] for t in second.tools]
    # the transcript is kept: the reader sees the user's question and the handover
    assert "[reader]" in str(second.messages[0]["content"])
    assert second.messages[1] == {"role": "user", "content": "what is the answer?"}
    assert second.messages[-1]["role"] == "tool"


PLANNER = {
    "system_prompt": "You plan [planner].",
    "subagents": ["reader", "writer"],
    "mode": "plan",
    "tools": [],
    "plan": {"max_replans": 1},
}


def diamond(c_agent: str = "writer") -> str:
    return json.dumps(
        {
            "steps": [
                {"id": "A", "goal": "goal A: read", "agent": "reader"},
                {"id": "B", "goal": "goal B: left", "agent": "reader", "depends_on": ["A"]},
                {"id": "C", "goal": "goal C: right", "agent": c_agent, "depends_on": ["A"]},
                {"id": "D", "goal": "goal D: join", "agent": "writer", "depends_on": ["B", "C"]},
            ]
        }
    )


def planner(plans: list[str]) -> Any:
    left = list(plans)

    def respond(req: dict[str, Any]) -> Reply:
        note = last_user(req)
        if note.startswith("The plan has been carried out"):
            return text("final answer. What was learned: diamonds work")
        return text(left.pop(0))

    return respond


def child(req: dict[str, Any]) -> Reply:
    task = last_user(req)
    if "fail me" in task:
        return error(400, {"error": {"message": "this step cannot be done"}})
    return text(f"done: {task.splitlines()[0]}").with_delay(0.5)


async def test_plan_with_a_diamond_runs_in_order_with_the_middle_steps_together(
    client: Client, tmp_path: Path
):
    model = ScriptedModel(
        responder=by_agent(
            {"[planner]": planner([diamond()]), "[reader]": child, "[writer]": child}
        )
    )
    agents = {**AGENTS, "writer": {**AGENTS["writer"], "policy": {"default": "allow"}}}
    async with Harness(client, tmp_path, model, agents={**agents, "planner": PLANNER}) as h:
        handle = await h.start("do the diamond", agent="planner")
        res = await asyncio.wait_for(handle.result(), timeout=90)
    assert res.status == "completed", res
    assert res.output == "final answer. What was learned: diamonds work"
    assert res.plan is not None and res.plan.replans == 0
    assert [(s.id, s.status) for s in res.plan.steps] == [
        ("A", "ok"),
        ("B", "ok"),
        ("C", "ok"),
        ("D", "ok"),
    ]
    assert all(s.run_id for s in res.plan.steps)
    steps = {first_user(r).split(":")[0][-1]: r for r in model.requests if "goal" in first_user(r)}
    a, b, c, d = (steps[k] for k in "ABCD")
    assert a.replied_at and b.replied_at and c.replied_at
    assert a.replied_at <= min(b.received_at, c.received_at)  # B and C after A
    assert max(b.received_at, c.received_at) < min(b.replied_at, c.replied_at)  # together
    assert d.received_at >= max(b.replied_at, c.replied_at)  # D after both
    assert "done: goal B: left" in first_user(d) and "done: goal C: right" in first_user(d)
    assert res.usage.total_tokens == sum(usage_of(r) for r in model.requests)


async def test_a_failing_step_replans_once(client: Client, tmp_path: Path):
    failing = json.loads(diamond())
    failing["steps"][2]["goal"] = "goal C: fail me"
    again = {
        "steps": [
            {"id": "E", "goal": "goal E: retry right", "agent": "reader", "depends_on": ["A"]},
            {"id": "F", "goal": "goal F: join", "agent": "writer", "depends_on": ["B", "E"]},
        ]
    }
    model = ScriptedModel(
        responder=by_agent(
            {
                "[planner]": planner([json.dumps(failing), json.dumps(again)]),
                "[reader]": child,
                "[writer]": child,
            }
        )
    )
    agents = {**AGENTS, "writer": {**AGENTS["writer"], "policy": {"default": "allow"}}}
    async with Harness(client, tmp_path, model, agents={**agents, "planner": PLANNER}) as h:
        res = await asyncio.wait_for((await h.start("do it", agent="planner")).result(), timeout=90)
    assert res.status == "completed", res
    assert res.plan is not None and res.plan.replans == 1
    assert [(s.id, s.status) for s in res.plan.steps] == [
        ("A", "ok"),
        ("B", "ok"),
        ("E", "ok"),
        ("F", "ok"),
    ]
    replan_notes = [last_user(r.body) for r in model.requests if "[planner]" in str(r.messages[0])]
    assert any("C [failed]" in n and "D [skipped]" in n for n in replan_notes)
    goals = [first_user(r) for r in model.requests if "goal" in first_user(r)]
    assert sum(1 for g in goals if g.startswith("goal A")) == 1  # A was not rerun


async def test_continue_as_new_keeps_the_children(client: Client, tmp_path: Path):
    boss = {**AGENTS["boss"], "limits": {"continue_as_new_every_turns": 1}}
    asks = iter(["first", "second"])

    def boss_reply(req: dict[str, Any]) -> Reply:
        tools = [m for m in req["messages"] if m.get("role") == "tool"]
        if len(tools) < 2:
            return tool_call("ask_reader", {"task": f"read {next(asks)}"})
        return text("both read: " + " | ".join(str(m["content"]) for m in tools))

    model = ScriptedModel(
        responder=by_agent({"[boss]": boss_reply, "[reader]": lambda r: text(last_user(r))})
    )
    async with Harness(client, tmp_path, model, agents={**AGENTS, "boss": boss}) as h:
        handle = await h.start("[boss] twice", agent="boss")
        res = await asyncio.wait_for(handle.result(), timeout=90)
        st = await client.get_workflow_handle(handle.id).query("state", result_type=RunState)
    assert res.status == "completed", res
    assert st.continued_runs == 2  # after each turn with an ask_reader call
    assert res.output == "both read: read first | read second"
    assert [(c.run_id, c.status) for c in res.children] == [
        (f"{handle.id}.reader-1", "completed"),
        (f"{handle.id}.reader-2", "completed"),
    ]
    assert res.usage.total_tokens == sum(usage_of(r) for r in model.requests)


async def test_worker_killed_while_children_run(
    client: Client, dev_server_address: str, tmp_path: Path
):
    slow = tool_call("slow_echo", {"text": "x", "seconds": 3})
    both = tool_calls([("ask_reader", {"task": "one"}), ("ask_writer", {"task": "two"})])
    model = ScriptedModel(
        responder=by_agent(
            {
                "[boss]": after_tools(both, lambda r: text("parent done")),
                "[reader]": after_tools(slow, lambda r: text("reader done")),
                "[writer]": after_tools(slow, lambda r: text("writer done")),
            }
        )
    )
    agents = {**AGENTS, "writer": {**AGENTS["writer"], "policy": {"default": "allow"}}}
    async with Harness(client, tmp_path, model, agents=agents, worker=False) as h:

        async def finish(handle: Any) -> tuple[RunResult, list[RunResult]]:
            res = await asyncio.wait_for(handle.result(), timeout=120)
            kids = [
                await client.get_workflow_handle(c.run_id, result_type=RunResult).result()
                for c in res.children
            ]
            return res, kids

        res, kids = await through_a_worker_crash(
            h,
            dev_server_address,
            tmp_path / "worker.log",
            start=lambda: h.start("[boss] survive", agent="boss"),
            crash_when=lambda: (
                sum(1 for e in journal_events(h.journal) if e.get("phase") == "start") >= 2
            ),
            finish=finish,
            crash_timeout=60,
        )
    assert res.status == "completed", res
    assert res.output == "parent done"
    assert [k.output for k in kids] == ["reader done", "writer done"]
    assert [c.status for c in res.children] == ["completed", "completed"]
    assert res.usage.total_tokens == sum(c.usage.total_tokens for c in res.children) + sum(
        usage_of(r) for r in model.requests if "[boss]" in str(r.messages[0])
    )


async def test_a_tool_step_denied_by_policy_is_rejected_and_replanned(
    client: Client, tmp_path: Path
):
    first = {
        "steps": [
            {
                "id": "R",
                "goal": "goal R: read",
                "tool": "read_file",
                "arguments": {"path": "README.md"},
            },
            {
                "id": "M",
                "goal": "goal M: add",
                "tool": "calculator",
                "arguments": {"expression": "6*7"},
            },
        ]
    }
    second = {"steps": [{"id": "L", "goal": "goal L: list", "tool": "list_files", "arguments": {}}]}
    planner_spec = {
        **PLANNER,
        "subagents": [],
        "tools": ["read_file", "calculator", "list_files"],
        "policy": {"default": "allow", "tools": {"calculator": {"action": "deny"}}},
    }
    model = ScriptedModel(
        responder=by_agent({"[planner]": planner([json.dumps(first), json.dumps(second)])})
    )
    async with Harness(client, tmp_path, model, agents={"planner": planner_spec}) as h:
        res = await asyncio.wait_for(
            (await h.start("use tools", agent="planner")).result(), timeout=60
        )
    assert res.status == "completed", res
    assert res.plan is not None and res.plan.replans == 1
    assert [(s.id, s.status) for s in res.plan.steps] == [("R", "ok"), ("L", "ok")]
    assert [(c.name, c.status) for c in res.tool_calls] == [
        ("read_file", "ok"),
        ("calculator", "denied"),
        ("list_files", "ok"),
    ]
    read = next(s for s in res.plan.steps if s.id == "R")
    assert "the answer is 42" in (read.result or "")
