"""Isolated tool queues: a tool (and an MCP server) on its own task queue, served by a tools-only
worker in another process (``agentctl worker --task-queue Q --tools-only``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client

from tests.support.harness import Harness, until_state
from tests.support.mcp import REPO, journal, stdio_server, stop
from tests.support.webui import current_details
from workers.testing.scripted_model import ScriptedModel, text, tool_calls


@pytest.fixture(autouse=True)
def _mcp_journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MCP_TEST_JOURNAL", str(tmp_path / "mcp.jsonl"))


def spawn_tools_worker(h: Harness, address: str, queue: str, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update(
        TEMPORAL_ADDRESS=address,
        TEMPORAL_NAMESPACE="default",
        AGENT_SPEC_FILE=str(h.spec_file),
        AGENT_TOOL_MODULES="tests.support.tools",
        PYTHONPATH=str(REPO),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "worker", "--task-queue", queue, "--tools-only"],
        cwd=REPO,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


async def pending_states(handle) -> list[int]:
    desc = await handle.describe()
    return [p.state for p in desc.raw_description.pending_activities]


async def test_tools_on_their_own_queue_wait_for_then_run_on_a_tools_only_worker(
    client: Client, dev_server_address: str, tmp_path: Path
):
    queue = f"tools-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(
        [tool_calls([("where", {"label": "isolated"}), ("t__whoami", {})]), text("done")]
    )
    agents = {
        "default": {
            "tools": [{"name": "where", "task_queue": queue}, "calculator"],
            "mcp_servers": {"t": stdio_server(task_queue=queue)},
        }
    }
    async with Harness(client, tmp_path, model, agents) as h:
        handle = await h.start("where do the tools run?")
        # No worker polls the queue yet: both calls wait, scheduled and not started; the run
        # is running (not failed); `state` shows the calls running, the Web UI details pending.
        st = await until_state(handle, lambda s: len(s.tool_calls) == 2)
        assert st.status == "running" and [c.status for c in st.tool_calls] == ["running"] * 2
        for _ in range(200):
            states = await pending_states(handle)
            if len(states) == 2:
                break
            await asyncio.sleep(0.05)
        scheduled = PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
        assert states == [scheduled, scheduled]
        details = await current_details(handle)  # the Web UI's current details of the run
        assert "`tool: where label=isolated` → **pending**" in details
        worker = spawn_tools_worker(h, dev_server_address, queue, tmp_path / "tools-worker.log")
        try:
            res = await asyncio.wait_for(handle.result(), 90)
        finally:
            stop(worker)
    assert res.status == "completed", res
    assert [c.status for c in res.tool_calls] == ["ok", "ok"]
    where_msg, whoami_msg = [
        m["content"] for m in model.requests[1].messages if m["role"] == "tool"
    ]
    assert where_msg == f"pid={worker.pid} queue={queue}"  # ran in the tools-only worker
    assert worker.pid != os.getpid()
    served = [e for e in journal() if e["tool"] == "whoami"]
    assert [str(e["pid"]) for e in served] == [whoami_msg]
    assert served[0]["ppid"] == worker.pid  # the MCP server was started by that worker


async def test_sandboxed_code_runs_on_its_own_queue_on_a_tools_only_worker(
    client: Client, dev_server_address: str, tmp_path: Path
):
    """``run_python`` on a queue of its own (``tools: [{name: run_python, task_queue: Q}]``),
    served by ``agentctl worker --task-queue Q --tools-only`` in another process, heartbeating."""
    import json

    from workers.testing.scripted_model import tool_call

    queue = f"sandbox-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel([tool_call("run_python", {"code": "print(6 * 7)"}), text("42")])
    agents = {"default": {"tools": [{"name": "run_python", "task_queue": queue}]}}
    async with Harness(client, tmp_path, model, agents) as h:
        worker = spawn_tools_worker(h, dev_server_address, queue, tmp_path / "sandbox-worker.log")
        try:
            handle = await h.start("compute it in the sandbox")
            res = await asyncio.wait_for(handle.result(), 90)
        finally:
            stop(worker)
    assert res.status == "completed" and [c.status for c in res.tool_calls] == ["ok"]
    [out] = [json.loads(m["content"]) for m in model.requests[1].messages if m["role"] == "tool"]
    assert out["exit_code"] == 0 and out["stdout"].strip() == "42"
    scheduled = [
        e.activity_task_scheduled_event_attributes
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "tool.invoke"
    ]
    assert [a.task_queue.name for a in scheduled] == [queue]
    assert scheduled[0].heartbeat_timeout.ToSeconds() > 0  # a stuck sandbox is noticed
