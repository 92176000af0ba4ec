"""MCP tool servers against real servers written with the same SDK (tests/support/mcp_server.py)."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.harness import Harness, until_state
from tests.support.mcp import gone, http_server, journal, stdio_server
from workers import client as rc
from workers.history import replay_histories
from workers.testing.scripted_model import ScriptedModel, text, tool_call, tool_calls
from workflows.models import ApproveSignal


@pytest.fixture(autouse=True)
def _mcp_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TEST_JOURNAL", str(tmp_path / "mcp.jsonl"))


def tool_messages(model: ScriptedModel, index: int) -> list[str]:
    """Contents of the tool messages the model saw in request ``index``."""
    return [m["content"] for m in model.requests[index].messages if m["role"] == "tool"]


def offered(model: ScriptedModel, index: int) -> list[str]:
    return [t["function"]["name"] for t in model.requests[index].tools]


async def test_stdio_tool_is_offered_with_its_schema_and_called(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [
            tool_call("t__echo", {"text": "hi"}, id="call_a"),
            tool_call("t.echo", {"text": "dotted"}, id="call_b"),  # NAME.TOOL is accepted
            text("done"),
        ]
    )
    agents = {"default": {"tools": ["calculator"], "mcp_servers": {"t": stdio_server()}}}
    async with Harness(client, tmp_path, model, agents) as h:
        handle = await h.start("echo please")
        res = await asyncio.wait_for(handle.result(), 60)
    assert res.status == "completed", res
    assert [(c.name, c.status) for c in res.tool_calls] == [("t__echo", "ok"), ("t__echo", "ok")]
    schemas = {t["function"]["name"]: t["function"] for t in model.requests[0].tools}
    assert set(schemas) == {
        "calculator",
        "t__echo",
        "t__add",
        "t__fail",
        "t__whoami",
        "t__getenv",
        "t__crash_once",
        "t__add_extra",
    }
    assert schemas["t__echo"]["parameters"]["properties"]["text"]["type"] == "string"
    assert schemas["t__echo"]["parameters"]["required"] == ["text"]
    assert "Echo the text back" in schemas["t__echo"]["description"]
    # the idempotency key arrives in the request's _meta, and is <workflow id>/<tool_call_id>
    assert tool_messages(model, 1) == [f"echo: hi (key={handle.id}/call_a)"]
    assert tool_messages(model, 2)[-1] == f"echo: dotted (key={handle.id}/call_b)"
    keys = [e["meta"].get("idempotency_key") for e in journal() if e["tool"] == "echo"]
    assert keys == [f"{handle.id}/call_a", f"{handle.id}/call_b"]
    # the pinned spec carries the MCP tools; the run never listed tools again
    assert res.turns == 3


async def test_tool_error_goes_back_to_the_model(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [
            tool_calls([("t__fail", {"reason": "no way"}), ("t__add", {"a": "x", "b": 1})]),
            text("understood"),
        ]
    )
    agents = {
        "default": {
            "tools": [],
            "mcp_servers": {"t": stdio_server(risk="read")},  # risk: read lets t__add run
        }
    }
    async with Harness(client, tmp_path, model, agents) as h:
        res = await h.run("fail please")
    assert res.status == "completed", res
    assert [c.status for c in res.tool_calls] == ["error", "error"]
    fail_msg, add_msg = tool_messages(model, 1)
    assert fail_msg.startswith("Error: ") and "refused: no way" in fail_msg
    assert add_msg.startswith("Error: ") and "valid integer" in add_msg
    assert [e["tool"] for e in journal()] == ["fail"]  # bad arguments never reached `add`


async def test_stdio_server_reused_approved_and_restarted_after_a_kill(
    client: Client, tmp_path: Path
):
    model = ScriptedModel(
        [
            tool_call("t__whoami", {}, id="w1"),
            tool_call("t__whoami", {}, id="w2"),
            tool_call("t__echo", {"text": "after the kill"}, id="e1"),
            tool_call("t__whoami", {}, id="w3"),
            text("done"),
        ]
    )
    agents = {
        "default": {
            "tools": [],
            "mcp_servers": {"t": stdio_server()},
            "policy": {"tools": {"t.echo": {"action": "approve"}}},  # NAME.TOOL in the policy
            "limits": {"loop_repeats": 5},  # whoami three times is not a loop here
        }
    }
    async with Harness(client, tmp_path, model, agents) as h:
        handle = await h.start("who serves?")
        st = await until_state(handle, lambda s: s.pending_approvals)
        assert st.status == "awaiting_approval"
        assert [p.name for p in st.pending_approvals] == ["t__echo"]
        first = [e["pid"] for e in journal() if e["tool"] == "whoami"]
        assert len(first) == 2 and first[0] == first[1]  # one process served both calls
        os.kill(first[0], signal.SIGKILL)
        await asyncio.to_thread(gone, first[0])
        await rc.approve_signal(
            client, handle.id, ApproveSignal(tool_call_id="e1", principal_id="alice")
        )
        res = await asyncio.wait_for(handle.result(), 60)
    assert res.status == "completed", res
    assert [c.status for c in res.tool_calls] == ["ok", "ok", "ok", "ok"]
    assert tool_messages(model, 3)[-1].startswith("echo: after the kill")
    echo_pid = next(e["pid"] for e in journal() if e["tool"] == "echo")
    assert echo_pid != first[0]  # a new process served the call after the kill
    assert tool_messages(model, 4)[-1] == str(echo_pid)  # and stayed for the next one


async def test_http_server_tool_list_is_pinned_at_run_start(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [
            tool_calls([("h__echo", {"text": "over http"}), ("h__add_extra", {})]),
            text("first run done"),
            text("second run done"),
        ]
    )
    with http_server() as (url, _proc):
        agents = {"default": {"tools": [], "mcp_servers": {"h": {"url": url}}}}
        async with Harness(client, tmp_path, model, agents) as h:
            handle = await h.start("first")
            res = await asyncio.wait_for(handle.result(), 60)
            assert res.status == "completed", res
            res2 = await h.run("second")
            history = await handle.fetch_history()
    assert res2.status == "completed", res2
    # the server is gone and its list has changed: the first run still replays, from its pins
    report = await replay_histories([history])
    assert report.compatible, report
    call_id = res.tool_calls[0].id
    assert tool_messages(model, 1)[0] == f"echo: over http (key={handle.id}/{call_id})"
    # the server's list changed during the first run, which still offered its pinned list
    assert offered(model, 0) == offered(model, 1)
    assert "h__extra" not in offered(model, 1)
    # a run started afterwards reads the list again, once
    assert "h__extra" in offered(model, 2)


async def test_http_server_down_is_retried_then_the_model_is_told(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("h__echo", {"text": "x"}, id="c1"), text("no server")])
    with http_server() as (url, proc):
        agents = {
            "default": {
                "tools": [],
                "mcp_servers": {"h": {"url": url, "max_attempts": 2}},
                "policy": {"tools": {"h__echo": {"action": "approve"}}},
            }
        }
        async with Harness(client, tmp_path, model, agents) as h:
            handle = await h.start("call a server that goes away")
            await until_state(handle, lambda s: s.pending_approvals)
            proc.kill()
            proc.wait()
            await rc.approve_signal(
                client, handle.id, ApproveSignal(tool_call_id="c1", principal_id="alice")
            )
            res = await asyncio.wait_for(handle.result(), 60)
            history = await handle.fetch_history()
    assert res.status == "completed", res
    assert [c.status for c in res.tool_calls] == ["error"]
    told = tool_messages(model, 1)[0]
    assert "given up after 2 attempt(s)" in told and "MCP server h is unavailable" in told
    tool_events = {
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "tool.invoke"
    }
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
        and e.activity_task_started_event_attributes.scheduled_event_id in tool_events
    ]
    assert attempts == [2]  # the failed call was retried before the model was told


async def test_secret_in_a_server_env_is_redacted_and_never_pinned(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MCP_TEST_SECRET", "s3cr3t-value-42")
    model = ScriptedModel([tool_call("t__getenv", {"name": "MCP_TEST_SECRET"}), text("ok")])
    server = stdio_server()
    server["env"]["MCP_TEST_SECRET"] = "${MCP_TEST_SECRET}"
    agents = {"default": {"tools": [], "mcp_servers": {"t": server}}}
    async with Harness(client, tmp_path, model, agents) as h:
        handle = await h.start("show me the secret")
        res = await asyncio.wait_for(handle.result(), 60)
        history = await handle.fetch_history()
    assert res.status == "completed", res
    assert tool_messages(model, 1) == ["[REDACTED]"]  # the server did read the real value
    events = "\n".join(str(e) for e in history.events)  # payloads as (escaped) JSON text
    assert "s3cr3t-value-42" not in events
    assert "${MCP_TEST_SECRET}" in events  # pinned as a reference, not a value


async def test_stdio_server_dying_mid_call_is_retried_on_a_new_process(
    client: Client, tmp_path: Path
):
    marker = tmp_path / "crashed"
    model = ScriptedModel([tool_call("t__crash_once", {"marker": str(marker)}), text("ok")])
    agents = {"default": {"tools": [], "mcp_servers": {"t": stdio_server()}}}
    async with Harness(client, tmp_path, model, agents) as h:
        handle = await h.start("crash it")
        res = await asyncio.wait_for(handle.result(), 60)
    assert res.status == "completed", res
    assert [c.status for c in res.tool_calls] == ["ok"]
    assert tool_messages(model, 1) == ["survived"]
    calls = [e for e in journal() if e["tool"] == "crash_once"]
    assert len(calls) == 2 and calls[0]["pid"] != calls[1]["pid"]


async def test_server_that_cannot_start_fails_the_run_naming_the_server(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([text("never asked")])
    agents = {
        "default": {"tools": [], "mcp_servers": {"bad": {"command": ["/nonexistent/mcp-server"]}}}
    }
    async with Harness(client, tmp_path, model, agents) as h:
        res = await h.run("start")
    assert res.status == "failed"
    assert "agents.default.mcp_servers.bad: MCP server bad is unavailable" in (res.error or "")
    assert model.count == 0
