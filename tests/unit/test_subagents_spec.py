"""Spec ``subagents:`` / ``handoffs:`` / ``mode: plan``: validation and the pinned agent tools."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from activities.contracts import ResolveSpecInput
from activities.runtime import RuntimeActivities
from activities.spec import AgentSpec, SpecError, resolve_agent, spec_hash
from activities.subagents import MAX_SUBAGENT_DEPTH, agent_tools


def write(tmp_path: Path, agents: dict) -> Path:
    path = tmp_path / "agents.yml"
    path.write_text(yaml.safe_dump({"agents": agents}))
    return path


PAIR = {
    "boss": {"tools": ["read_file"], "subagents": ["reader", "writer"], "handoffs": ["writer"]},
    "reader": {"description": "Studies files.", "tools": ["read_file"]},
    "writer": {"system_prompt": "You draft notes.\nCarefully.", "handoffs": ["boss"]},
}


def test_subagents_and_handoffs_resolve(tmp_path: Path):
    spec = resolve_agent(write(tmp_path, PAIR), "boss", "m")
    assert spec.subagents == ["reader", "writer"] and spec.handoffs == ["writer"]
    assert spec.mode == "task" and spec.plan.max_replans == 1


@pytest.mark.parametrize(
    "agents, message",
    [
        ({"a": {"subagents": ["ghost"]}}, "agents.a.subagents: unknown agent 'ghost'"),
        ({"a": {"handoffs": ["ghost"]}}, "agents.a.handoffs: unknown agent 'ghost'"),
        ({"a": {"subagents": ["a"]}}, "cannot name itself"),
        ({"a": {"handoffs": ["a"]}}, "cannot name itself"),
        (
            {"a": {"subagents": ["b"]}, "b": {"subagents": ["c"]}, "c": {"subagents": ["a"]}},
            "cycle: a -> b -> c -> a",
        ),
        ({"a": {"subagents": ["b c"]}, "b c": {}}, "cannot name a tool"),
        ({"a": {"subagents": ["b", "b"]}, "b": {}}, "unique"),
        ({"a": {"mode": "graph"}}, "agents.a.mode"),
        ({"a": {"plan": {"max_replans": -1}}}, "agents.a.plan.max_replans"),
    ],
)
def test_bad_agent_graphs_name_the_field(tmp_path: Path, agents: dict, message: str):
    with pytest.raises(SpecError, match=message):
        resolve_agent(write(tmp_path, agents), "a", "m")


def test_depth_is_bounded(tmp_path: Path):
    names = [f"a{i}" for i in range(MAX_SUBAGENT_DEPTH + 2)]
    agents = {n: {"subagents": [names[i + 1]]} for i, n in enumerate(names[:-1])}
    agents[names[-1]] = {}
    with pytest.raises(SpecError, match=f"deeper than {MAX_SUBAGENT_DEPTH} levels"):
        resolve_agent(write(tmp_path, agents), "a0", "m")
    assert resolve_agent(write(tmp_path, agents), "a1", "m").subagents == ["a2"]


def test_handoffs_may_go_back_and_forth(tmp_path: Path):
    path = write(tmp_path, PAIR)
    assert resolve_agent(path, "writer", "m").handoffs == ["boss"]


def test_agent_tools_are_pinned_with_schemas(tmp_path: Path):
    tools = agent_tools(PAIR, "boss")
    assert [(t.name, t.kind, t.agent) for t in tools] == [
        ("ask_reader", "subagent", "reader"),
        ("ask_writer", "subagent", "writer"),
        ("handoff_to_writer", "handoff", "writer"),
    ]
    ask = tools[0].openai_schema()["function"]
    assert ask["parameters"]["required"] == ["task"]
    assert "Studies files." in ask["description"]
    assert "You draft notes. Carefully." in tools[1].description


async def test_spec_resolve_pins_agent_tools_after_the_workers_tools(tmp_path: Path):
    acts = RuntimeActivities(str(write(tmp_path, PAIR)), "m")
    pinned = await acts.spec_resolve(ResolveSpecInput(agent="boss"))
    assert [t.name for t in pinned.tools] == [
        "read_file",
        "ask_reader",
        "ask_writer",
        "handoff_to_writer",
    ]
    child = await acts.spec_resolve(ResolveSpecInput(agent="reader"))
    assert [t.name for t in child.tools] == ["read_file"]


def test_hash_of_a_spec_without_the_new_fields_is_unchanged():
    spec = AgentSpec(name="a", model="m")
    plain = spec_hash(spec, [])
    new = {
        "description",
        "subagents",
        "handoffs",
        "mode",
        "plan",
        "code_mode",
        "local_tools_in_model_step",
        "guardrails",
    }
    before = {k: v for k, v in spec.model_dump(mode="json").items() if k not in new}
    del before["limits"]["max_sandbox_seconds"], before["pricing"]["sandbox_per_second"]
    del before["pricing"]["cached_prompt_per_mtok"]
    del before["policy"]["cedar"], before["policy"]["judge"]  # issue #39
    blob = json.dumps({"spec": before, "tools": []}, sort_keys=True, separators=(",", ":"))
    assert plain == hashlib.sha256(blob.encode()).hexdigest()
    assert plain == spec_hash(AgentSpec(name="a", model="m", subagents=[]), [])
    assert plain != spec_hash(AgentSpec(name="a", model="m", mode="plan"), [])
    sandboxed = AgentSpec.model_validate(
        {"name": "a", "model": "m", "limits": {"max_sandbox_seconds": 5}}
    )
    assert plain != spec_hash(sandboxed, [])
    assert plain != spec_hash(AgentSpec(name="a", model="m", local_tools_in_model_step=False), [])
    cached = AgentSpec.model_validate(
        {"name": "a", "model": "m", "pricing": {"cached_prompt_per_mtok": 0.5}}
    )
    assert plain != spec_hash(cached, [])
    guarded = AgentSpec.model_validate(
        {"name": "a", "model": "m", "guardrails": {"input": ["pii"]}}
    )
    assert plain != spec_hash(guarded, [])
