"""MCP servers nobody here wrote (issue #19): the official reference servers from PyPI, a server
that never answers its handshake, servers that die at start; their stderr in the JSON log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import structlog
from temporalio.client import Client

from activities.contracts import McpServerConfig
from activities.mcp.pool import McpPool, McpServerFailed
from tests.support.harness import Harness
from workers.testing.scripted_model import ScriptedModel, text, tool_call


def _sleepers() -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        if (p.info.get("cmdline") or [])[:2] == ["sleep", "777"]:
            out.append(p)
    return out


def _mcp(name: str, command: list[str], **extra: object) -> dict:
    return {"default": {"tools": [], "mcp_servers": {name: {"command": command, **extra}}}}


async def test_a_server_that_never_answers_the_handshake_fails_fast_naming_it_and_is_stopped(
    client: Client, tmp_path: Path
):
    before = {p.pid for p in _sleepers()}
    model = ScriptedModel([text("never asked")])
    agents = _mcp("hang", ["sleep", "777"], handshake_timeout_seconds=1)
    async with Harness(client, tmp_path, model, agents) as h:
        res = await h.run("start")
    assert res.status == "failed" and res.stopped_reason == "MCP server unavailable"
    assert "MCP server hang did not answer the MCP handshake within 1 s" in (res.error or "")
    assert model.count == 0
    left = [p for p in _sleepers() if p.pid not in before]
    for p in left:  # a process stopped by the pool may still be exiting: give it a moment
        try:
            p.wait(timeout=5)
        except psutil.TimeoutExpired:
            pass
    assert not [p for p in _sleepers() if p.pid not in before and p.is_running()]


@pytest.mark.parametrize(
    ("module", "args", "reason"),
    [
        ("mcp_server_time", ["--local-timezone", "Not/AZone"], "Not/AZone"),
        ("mcp_server_git", ["--repository", "/nonexistent"], "/nonexistent"),
    ],
)
async def test_a_reference_server_that_dies_at_start_says_why(
    client: Client, tmp_path: Path, module: str, args: list[str], reason: str
):
    model = ScriptedModel([text("never asked")])
    agents = _mcp("ref", ["python", "-m", module, *args])
    async with Harness(client, tmp_path, model, agents) as h:
        res = await h.run("start")
    assert res.status == "failed" and res.stopped_reason == "MCP server unavailable"
    err = res.error or ""
    assert "MCP server ref exited before answering the handshake" in err
    assert "its stderr ends with" in err and reason in err, err


async def test_the_reference_time_and_git_servers_work_unchanged(client: Client, tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "hello.txt").write_text("hi\n")
    model = ScriptedModel(
        [
            tool_call("time__get_current_time", {"timezone": "UTC"}),
            tool_call("git__git_status", {"repo_path": str(repo)}),
            text("done"),
        ]
    )
    agents = {
        "default": {
            "tools": [],
            "mcp_servers": {
                "time": {"command": ["python", "-m", "mcp_server_time"], "risk": "read"},
                "git": {
                    "command": ["python", "-m", "mcp_server_git", "--repository", str(repo)],
                    "risk": "read",
                },
            },
        }
    }
    async with Harness(client, tmp_path, model, agents) as h:
        res = await h.run("what time is it and what is the repo's status?")
    assert res.status == "completed", res.error
    assert [c.status for c in res.tool_calls] == ["ok", "ok"]
    tool_msgs = [m["content"] for m in model.requests[2].messages if m["role"] == "tool"]
    assert "UTC" in tool_msgs[0]
    assert "hello.txt" in tool_msgs[1]


async def test_a_servers_stderr_goes_into_the_log_as_fields_and_into_the_error():
    script = "import sys; print('boom: config missing', file=sys.stderr); sys.exit(3)"
    pool = McpPool()
    server = McpServerConfig(name="noisy", command=[sys.executable, "-c", script])
    try:
        with structlog.testing.capture_logs() as logs:
            with pytest.raises(McpServerFailed, match="boom: config missing"):
                await pool.list_tools(server)
    finally:
        await pool.aclose()
    lines = [e for e in logs if e["event"] == "mcp_server_stderr"]
    assert lines and lines[0]["server"] == "noisy"
    assert lines[0]["line"] == "boom: config missing"
