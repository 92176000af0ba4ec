"""What a tool can do to a run (a probe, 2026-11-27): results that cannot be sent, tools that never
return, MCP servers that flood, freeze or die, sandboxed programs that flood their output. Each
ends as a named outcome for the model, run once, and leaves the worker able to take more work."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from temporalio.client import Client

from activities.contracts import McpServerConfig
from activities.mcp.pool import McpPool
from activities.mcp.tools import result_text
from activities.storage import LocalStorageDriver
from activities.tools import ToolContext, sandbox_tools, threads
from tests.support.harness import ROOT, TEST_TOOLS, Harness
from tests.support.history import no_task_failed
from tests.support.mcp import gone
from tests.support.mcp import journal as mcp_journal
from tests.support.tools import journal_events
from workers.testing.scripted_model import ScriptedModel, text, tool_call, tool_calls


def tool_messages(model: ScriptedModel, index: int) -> list[str]:
    """Contents of the tool messages the model saw in request ``index``."""
    return [m["content"] for m in model.requests[index].messages if m["role"] == "tool"]


async def test_results_that_cannot_be_sent_are_named_and_the_tool_runs_once(
    client: Client, tmp_path: Path
):
    kinds = ["surrogate", "bytes", "deep", "cycle"]
    model = ScriptedModel([tool_calls([("odd_result", {"kind": k}) for k in kinds]), text("ok")])
    agents = {"default": {"tools": [*TEST_TOOLS, "odd_result"], "policy": {"default": "allow"}}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("go")
        res = await handle.result()
        await no_task_failed(handle)
    assert res.status == "completed"
    ran = [e["kind"] for e in journal_events(h.journal) if e["tool"] == "odd_result"]
    assert sorted(ran) == sorted(kinds)  # once each: no retry of a tool that already ran
    surrogate, raw, deep, cycle = tool_messages(model, 1)
    assert surrogate == "half \ufffd a pair"
    assert raw == "\ufffd\ufffd ok \ufffd("
    assert deep == "Error: odd_result ran, but its result nests too deeply to be turned into text"
    assert cycle.startswith("Error: odd_result ran, but its result cannot be turned into text")
    assert [c.status for c in res.tool_calls] == ["ok", "ok", "error", "error"]


async def test_sync_tools_that_never_return_leave_the_worker_able_to_run_tools(
    client: Client, tmp_path: Path
):
    def stuck() -> int:
        return sum(t.name == "tool-hang_forever" for t in threading.enumerate())

    before = stuck()
    hung = [("hang_forever", {"n": n}) for n in range(8)]  # more than the default executor's 6
    model = ScriptedModel([tool_calls(hung), tool_call("record", {"label": "after"}), text("ok")])
    agents = {"default": {"tools": [*TEST_TOOLS, "hang_forever"], "policy": {"default": "allow"}}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("go")
        res = await asyncio.wait_for(handle.result(), 30)  # it stalled for good before
        await no_task_failed(handle)
    assert res.status == "completed"
    assert [c.status for c in res.tool_calls] == ["timed_out"] * 8 + ["ok"]
    assert "timeout" in tool_messages(model, 1)[0]
    assert [e["label"] for e in journal_events(h.journal) if e["tool"] == "record"] == ["after"]
    assert stuck() - before == 8  # each stuck call holds a thread of its own
    assert threads.left_running() >= 8  # counted as left running


def test_a_stuck_sync_tool_does_not_keep_the_process_from_exiting(tmp_path: Path):
    script = (
        "import asyncio\n"
        "from activities.tools import REGISTRY, ToolContext\n"
        "import tests.support.tools\n"
        "async def main():\n"
        "    call = REGISTRY.invoke('hang_forever', {'n': 1}, ToolContext(workspace='.'))\n"
        "    try:\n"
        "        await asyncio.wait_for(call, 0.5)\n"
        "    except TimeoutError:\n"
        "        print('timed out', flush=True)\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=20
    )  # asyncio.run joined the default executor's stuck thread: this never returned
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "timed out"
    assert "tool_thread_left_running" in proc.stdout  # the stuck thread is logged


def hostile_server(**extra: Any) -> dict[str, Any]:
    """An ``mcp_servers`` entry for tests/support/mcp_hostile_server.py: one short attempt."""
    return {
        "command": ["python", "-m", "tests.support.mcp_hostile_server"],
        "cwd": str(ROOT),
        "env": {"MCP_TEST_JOURNAL": "${MCP_TEST_JOURNAL}"},
        "timeout_seconds": 3,  # past the check (1.5 s) and a new server's start (about 1 s)
        "max_attempts": 1,
        "handshake_timeout_seconds": 1.5,  # also how long a ping may take after a timed-out call
        **extra,
    }


def pids(tool: str) -> list[int]:
    return [e["pid"] for e in mcp_journal() if e["tool"] == tool]


def mcp_agents() -> dict[str, Any]:
    return {
        "default": {
            "tools": [],
            "mcp_servers": {"x": hostile_server()},
            "limits": {"loop_repeats": 5},  # whoami again and again is no loop here
        }
    }


def pool_server(handshake_timeout_seconds: float) -> McpServerConfig:
    entry = hostile_server()
    return McpServerConfig(
        name="x",
        command=entry["command"],
        cwd=entry["cwd"],
        env=entry["env"],
        handshake_timeout_seconds=handshake_timeout_seconds,  # also the check's limit
    )


async def call(pool: McpPool, server: McpServerConfig, tool: str, timeout: float = 10) -> str:
    """One call of the hostile server's ``tool``, cancelled after ``timeout`` seconds."""
    args = {"mb": 50} if tool == "flood" else {}
    result = await asyncio.wait_for(pool.call_tool(server, tool, args, {}), timeout)
    return result_text(result)


async def test_a_timed_out_mcp_call_keeps_a_server_that_answers_and_replaces_a_frozen_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MCP_TEST_JOURNAL", str(tmp_path / "mcp.jsonl"))
    pool, server = McpPool(), pool_server(3)
    try:
        first = int(await call(pool, server, "whoami"))  # started
        with pytest.raises(TimeoutError):
            await call(pool, server, "hang", 1)  # never ends; the server still answers others
        kept = int(await call(pool, server, "whoami"))
        with pytest.raises(TimeoutError):
            await call(pool, server, "freeze", 1)  # the server answers nothing more, alive
        fresh = int(await call(pool, server, "whoami"))  # waited for the check: a new server
        (hang,), (freeze,) = pids("hang"), pids("freeze")
        assert first == kept == hang == freeze
        assert fresh != freeze and pool.running() == 1
        await asyncio.to_thread(gone, freeze)  # it was stopped: no orphan
    finally:
        await pool.aclose()
    await asyncio.to_thread(gone, fresh)


async def test_an_mcp_server_flooding_a_reply_is_replaced_after_the_call_times_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MCP_TEST_JOURNAL", str(tmp_path / "mcp.jsonl"))
    # a new server's handshake runs while the SDK still reads the flood: give it time
    pool, server = McpPool(), pool_server(5)
    try:
        await call(pool, server, "whoami")  # started
        with pytest.raises(TimeoutError):  # 50 MiB in one line: the SDK reads it for minutes,
            await call(pool, server, "flood", 1.5)  # and its reply held up every later one
        fresh = int(await call(pool, server, "whoami"))
        (flood,) = pids("flood")
        assert fresh != flood
        await asyncio.to_thread(gone, flood)
    finally:
        await pool.aclose()
    await asyncio.to_thread(gone, fresh)


def test_a_sandboxed_program_printing_without_end_costs_the_worker_no_memory(tmp_path: Path):
    script = (
        "import json\n"
        "from activities.tools.registry import ToolContext\n"
        "from activities.tools.sandbox_tools import configure, run_python\n"
        f"configure({str(tmp_path / 'sandbox')!r})\n"
        f"ctx = ToolContext(workspace={str(tmp_path)!r}, run_id='run-x')\n"
        "code = 'import sys\\nwhile True: sys.stdout.write(\"y\" * 2**20)'\n"
        "r = json.loads(run_python(ctx, code, timeout_s=3))\n"
        "hwm = next(x for x in open('/proc/self/status') if x.startswith('VmHWM:'))\n"
        "r['maxrss_mib'] = int(hwm.split()[1]) // 1024  # this process's peak RSS\n"
        "print(json.dumps({k: r[k] for k in ('timed_out', 'truncated', 'maxrss_mib')}))\n"
        "print(len(r['stdout']), set(r['stdout']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    summary, stdout = proc.stdout.splitlines()[-2:]
    result = json.loads(summary)
    assert result["timed_out"] and result["truncated"]
    assert stdout == "65536 {'y'}"  # the first 64 KiB, the rest dropped as it came
    assert result["maxrss_mib"] < 400, proc.stdout  # communicate() kept it all: gigabytes in 3 s


def test_a_sandboxed_program_writing_many_files_keeps_a_bounded_number_named(tmp_path: Path):
    sandbox_tools.configure(tmp_path / "sandbox", store=LocalStorageDriver(tmp_path / "store"))
    ctx = ToolContext(workspace=tmp_path, run_id="run-x")
    try:
        code = (
            "for i in range(150):\n"
            "    open(f'f{i:03}', 'w').write('x')\n"
            "open('zz-big', 'wb').write(b'y' * 2**20)\n"
        )
        r = json.loads(sandbox_tools.run_python(ctx, code))
        big = json.loads(
            sandbox_tools.run_python(
                ctx, "for i in range(5):\n    open(f'b{i}', 'wb').write(b'z' * 15 * 2**20)"
            )
        )
    finally:
        sandbox_tools.configure(tmp_path / "sandbox")
    assert r["exit_code"] == 0
    # every key travels in the call's result: 30,000 files made it too large for Temporal
    assert sorted(ctx.new_files)[:3] == ["b0", "b1", "b2"] and len(ctx.new_files) == 104
    assert [f["name"] for f in r["files"]] == [f"f{i:03}" for i in range(100)]
    assert r["not_kept"]["files"] == 51 and r["not_kept"]["bytes"] == 50 + 2**20
    assert "at most 100 files" in r["not_kept"]["why"]
    assert [f["name"] for f in big["files"]] == ["b0", "b1", "b2", "b3"]  # 64 MiB at most
    assert big["not_kept"] == {**big["not_kept"], "files": 1, "bytes": 15 * 2**20}


def test_an_async_tool_that_swallows_cancellation_does_not_keep_the_worker_from_exiting():
    script = (
        "import asyncio\n"
        "from activities.tools import REGISTRY, ToolContext\n"
        "from workers.worker import run_to_end\n"
        "import tests.support.tools\n"
        "async def main():\n"
        "    call = REGISTRY.invoke('ignore_cancel', {'n': 1}, ToolContext(workspace='.'))\n"
        "    task = asyncio.ensure_future(call)\n"
        "    await asyncio.sleep(0.3)\n"
        "    task.cancel()  # what a timed-out activity does; the tool swallows it\n"
        "    return 'main done'\n"
        "print(run_to_end(main(), leftover_seconds=0.5), flush=True)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=20
    )  # asyncio.run waited for such a task: the worker never exited after SIGTERM
    assert proc.returncode == 0, proc.stderr
    assert "tasks_left_running" in proc.stdout  # logged, then abandoned with the loop
    assert proc.stdout.splitlines()[-1] == "main done"


async def test_a_retried_write_whose_first_attempt_still_runs_is_not_started_again(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([tool_call("slow_write", {"label": "once"}), text("ok")])
    agents = {"default": {"tools": [*TEST_TOOLS, "slow_write"], "policy": {"default": "allow"}}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("go")
        res = await asyncio.wait_for(handle.result(), 30)
        await no_task_failed(handle)
    assert res.status == "completed"
    starts = [e for e in journal_events(h.journal) if e.get("phase") == "start"]
    assert len(starts) == 1  # attempt 2 ran beside attempt 1 before: the write, twice at once
    (message,) = tool_messages(model, 1)
    assert message.startswith("Error: slow_write was not run again: its earlier attempt timed out")


async def test_bytes_that_are_not_utf8_on_an_mcp_servers_stdout_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MCP_TEST_JOURNAL", str(tmp_path / "mcp.jsonl"))
    pool, server = McpPool(), pool_server(10)
    try:
        # the SDK's reader died on them ("strict" decoding): this call and every later one hung
        assert await call(pool, server, "garbage", 5) == "answered after garbage"
        assert int(await call(pool, server, "whoami", 5)) == pids("garbage")[0]
        with pytest.raises(MCPError, match="Connection closed"):  # exits mid-call: named
            await call(pool, server, "vanish", 5)
        fresh = int(await call(pool, server, "whoami", 5))  # the next call: a new server
        assert fresh != pids("vanish")[0]
    finally:
        await pool.aclose()
    await asyncio.to_thread(gone, fresh)
