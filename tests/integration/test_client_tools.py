"""Tools the client runs (issue #38 part 2): the call published, a durable wait for ``tool_result``."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from activities.contracts import ClientToolDef
from tests.support.cli import agentctl, agentctl_env
from tests.support.harness import Harness, until_state
from workers import client as rc
from workers.client import follow
from workers.testing.scripted_model import ScriptedModel, text, tool_call, tool_calls
from workflows.handlers import TOOL_RESULT_REFUSED
from workflows.models import RunState, ToolResultUpdate

PICK = {
    "name": "pick_file",
    "client": True,
    "description": "Ask the user to pick a file in their browser.",
    "parameters": {
        "type": "object",
        "properties": {"prompt": {"type": "string"}},
        "required": ["prompt"],
    },
}
AGENTS: dict[str, dict[str, Any]] = {"default": {"tools": ["calculator", PICK]}}


def _waiting(st: RunState) -> bool:
    return bool(st.pending_client_tools)


async def _refusal(client: Client, run_id: str, **upd: Any) -> str:
    with pytest.raises(WorkflowUpdateFailedError) as e:
        await rc.tool_result(client, run_id, upd)
    cause = e.value.cause
    assert isinstance(cause, ApplicationError)
    assert cause.type == TOOL_RESULT_REFUSED and cause.non_retryable
    return cause.message


async def test_a_client_tool_round_trip(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("pick_file", {"prompt": "which one?"}), text("got it")])
    async with Harness(client, tmp_path, model, agents=AGENTS) as h:
        handle = await h.start("pick a file", principal_id="ann", mode="chat")
        st = await until_state(handle, _waiting)
        pending = st.pending_client_tools[0]
        assert pending.name == "pick_file" and pending.arguments == {"prompt": "which one?"}
        assert pending.deadline > pending.requested_at
        # the model was offered the client tool with its schema
        offered = {t["function"]["name"]: t for t in model.requests[0].body["tools"]}
        assert offered["pick_file"]["function"]["parameters"] == PICK["parameters"]
        events = [e async for e in _events_until(client, handle.id, "client_tool_requested")]
        asked = events[-1]
        assert asked["tool_call_id"] == pending.tool_call_id
        assert asked["name"] == "pick_file" and asked["arguments"] == {"prompt": "which one?"}
        res = await rc.tool_result(
            client,
            handle.id,
            ToolResultUpdate(
                tool_call_id=pending.tool_call_id, content="notes.txt", principal_id="ann"
            ),
        )
        assert res.status == "ok"
        st = await until_state(handle, lambda s: s.status == "waiting_for_message")
        # a second answer for the same call: refused, it already has its result
        msg = await _refusal(
            client,
            handle.id,
            tool_call_id=pending.tool_call_id,
            content="again",
            principal_id="ann",
        )
        await handle.terminate("test over")
    assert st.output == "got it" and not st.pending_client_tools
    call = st.tool_calls[0]
    assert call.name == "pick_file" and call.status == "ok" and call.result_chars == 9
    tool_msgs = [m for m in model.requests[1].messages if m["role"] == "tool"]
    assert tool_msgs == [
        {"role": "tool", "tool_call_id": pending.tool_call_id, "content": "notes.txt"}
    ]
    assert "already" in msg


async def _events_until(client: Client, run_id: str, kind: str):  # noqa: ANN202
    async def go() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        async for item in follow(client, run_id):
            seen.append(item)
            if item["type"] == kind:
                return seen
        return seen

    for item in await asyncio.wait_for(go(), 20):
        yield item


async def test_refusals_name_the_reason_and_change_nothing(client: Client, tmp_path: Path):
    agents = {
        "default": {
            "tools": ["calculator", PICK],
            "policy": {"approvers": ["bob", "role:ops"]},
        }
    }
    model = ScriptedModel(
        [
            tool_calls([("calculator", {"expression": "2+2"}), ("pick_file", {"prompt": "p"})]),
            text("done"),
        ]
    )
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("go", principal_id="ann")
        st = await until_state(handle, _waiting)
        cid = st.pending_client_tools[0].tool_call_id
        calc = next(c.id for c in st.tool_calls if c.name == "calculator")
        assert "unknown" in await _refusal(client, handle.id, tool_call_id="nope", content="x")
        assert "not a client" in await _refusal(
            client, handle.id, tool_call_id=calc, content="x", principal_id="ann"
        ) or "finished" in await _refusal(
            client, handle.id, tool_call_id=calc, content="x", principal_id="ann"
        )
        assert "mallory" in await _refusal(
            client, handle.id, tool_call_id=cid, content="x", principal_id="mallory"
        )
        bad = await _refusal(client, handle.id, tool_call_id=cid, content=123)
        assert "content" in bad
        too_big = await _refusal(client, handle.id, tool_call_id=cid, content="x" * 300_000)
        assert "at most" in too_big
        st = await until_state(handle, _waiting)
        assert st.pending_client_tools[0].tool_call_id == cid  # still waiting
        # an approver (by role) may answer as well as the run's principal
        res = await rc.tool_result(
            client,
            handle.id,
            ToolResultUpdate(
                tool_call_id=cid,
                content="disk full",
                is_error=True,
                principal_id="carol",
                roles=["ops"],
            ),
        )
        assert res.status == "error"
        result = await handle.result()
    assert result.status == "completed"
    pick = next(c for c in result.tool_calls if c.name == "pick_file")
    assert pick.status == "error"
    tool_msgs = {
        m["tool_call_id"]: m["content"] for m in model.requests[1].messages if m["role"] == "tool"
    }
    assert tool_msgs[cid] == "Error: disk full"


async def test_the_model_is_told_when_the_client_tool_times_out(client: Client, tmp_path: Path):
    slow = {**PICK, "timeout_seconds": 1}
    model = ScriptedModel([tool_call("pick_file", {"prompt": "p"}), text("gave up")])
    async with Harness(client, tmp_path, model, agents={"default": {"tools": [slow]}}) as h:
        handle = await h.start("go", principal_id="ann", mode="chat")
        st = await until_state(handle, _waiting)
        cid = st.pending_client_tools[0].tool_call_id
        st = await until_state(handle, lambda s: s.status == "waiting_for_message")
        late = await _refusal(
            client, handle.id, tool_call_id=cid, content="late", principal_id="ann"
        )
        await handle.terminate("test over")
    assert st.tool_calls[0].status == "timed_out"
    told = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"][0]
    assert "did not return a result" in told and "1 seconds" in told
    assert "timed_out" in late


async def test_client_tools_sent_with_the_request_and_a_worker_restart(
    client: Client, tmp_path: Path
):
    """A front end's own tool (``RunRequest.client_tools``); the wait outlives its worker."""
    model = ScriptedModel([tool_call("read_clipboard", {}), text("pasted")])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start(
            "paste",
            principal_id="ann",
            client_tools=[ClientToolDef(name="read_clipboard", description="The clipboard.")],
        )
        st = await until_state(handle, _waiting)
        cid = st.pending_client_tools[0].tool_call_id
        await h.stop_worker()
        await h.start_worker()  # a new worker: the run is rebuilt from its history
        await rc.tool_result(
            client, handle.id, {"tool_call_id": cid, "content": "hello", "principal_id": "ann"}
        )
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "completed" and result.tool_calls[0].status == "ok"
    assert [m["content"] for m in model.requests[1].messages if m["role"] == "tool"] == ["hello"]


async def test_a_client_tool_name_clashing_with_the_agents_tool_fails_the_start(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([text("never")])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start(
            "x", client_tools=[ClientToolDef(name="calculator", description="mine")]
        )
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "failed"
    assert "calculator" in (result.error or result.stopped_reason)


async def test_approval_comes_first_then_the_client_and_an_interrupt_cancels_the_wait(
    client: Client, tmp_path: Path
):
    agents = {
        "default": {
            "tools": [PICK],
            "policy": {"approvers": ["bob"], "tools": {"pick_file": {"action": "approve"}}},
        }
    }
    model = ScriptedModel([tool_call("pick_file", {"prompt": "p"}), text("never")])
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("go", principal_id="ann")
        st = await until_state(handle, lambda s: bool(s.pending_approvals))
        cid = st.pending_approvals[0].tool_call_id
        assert not st.pending_client_tools  # not published before it is approved
        early = await _refusal(client, handle.id, tool_call_id=cid, content="x", principal_id="ann")
        assert "not waiting for a client's result" in early
        await rc.decide(client, handle.id, cid, "approve", "bob")
        st = await until_state(handle, _waiting)
        assert st.pending_client_tools[0].tool_call_id == cid
        await rc.interrupt(client, handle.id, "ann", "enough")
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.status == "interrupted"
    assert result.tool_calls[0].status == "cancelled"
    assert len(model.requests) == 1


async def test_agentctl_tool_result(client: Client, tmp_path: Path, dev_server_address: str):
    model = ScriptedModel([tool_call("pick_file", {"prompt": "p"}), text("ok")])
    async with Harness(client, tmp_path, model, agents=AGENTS) as h:
        env = agentctl_env(h, dev_server_address)
        handle = await h.start("go", principal_id="ann")
        st = await until_state(handle, _waiting)
        cid = st.pending_client_tools[0].tool_call_id
        shown = await agentctl("status", handle.id, env=env)
        assert f"client tool: {cid} pick_file" in shown.stdout
        both = await agentctl(
            "tool-result", handle.id, cid, "--content", "a", "--error", "b", env=env
        )
        neither = await agentctl("tool-result", handle.id, cid, env=env)
        assert both.returncode == 2 and neither.returncode == 2
        unknown = await agentctl("tool-result", handle.id, "call_x", "--content", "a", env=env)
        assert unknown.returncode == 1 and "call_x is unknown" in unknown.stderr
        given = await agentctl(
            "tool-result", handle.id, cid, "--error", "no such file", "-p", "ann", env=env
        )
        assert given.returncode == 0, given.stderr
        assert f"result of {cid} given (error)" in given.stdout
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.tool_calls[0].status == "error"
    told = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert told == ["Error: no such file"]


async def test_client_tools_sent_with_a_message_in_a_chat_run(client: Client, tmp_path: Path):
    model = ScriptedModel([text("hi"), tool_call("geo", {}), text("you are in Paris")])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("hello", principal_id="ann", mode="chat")
        await until_state(handle, lambda s: s.status == "waiting_for_message")
        await rc.send_message(
            client,
            handle.id,
            "where am I?",
            "ann",
            client_tools=[
                ClientToolDef(name="geo", description="The user's location."),
                ClientToolDef(name="calculator", description="clashes"),
            ],
        )
        st = await until_state(handle, _waiting)
        cid = st.pending_client_tools[0].tool_call_id
        await rc.tool_result(
            client, handle.id, {"tool_call_id": cid, "content": "Paris", "principal_id": "ann"}
        )
        st = await until_state(handle, lambda s: s.output == "you are in Paris")
        await handle.terminate("test over")
    offered = [t["function"]["name"] for t in model.requests[1].body["tools"]]
    assert "geo" in offered and "geo" not in [
        t["function"]["name"] for t in model.requests[0].body["tools"]
    ]
    calc = [t for t in model.requests[1].body["tools"] if t["function"]["name"] == "calculator"]
    assert calc[0]["function"]["description"] != "clashes"  # the agent's own tool stays
    assert any("clashes" in i.reason for i in st.ignored_signals)
