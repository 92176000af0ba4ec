"""The spec's ``mcp_servers:`` and ``tools: [{name, task_queue}]``, MCP tool names, ``${VAR}``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml
from mcp.types import CallToolResult, ImageContent, TextContent

from activities.contracts import McpServerConfig
from activities.mcp.config import (
    McpConfigError,
    canonical_tool_name,
    expand,
    referenced_vars,
    stdio_argv,
    tool_name,
)
from activities.mcp.pool import pool_key
from activities.mcp.tools import result_text
from activities.spec import SpecError, resolve_agent


def write(tmp_path: Path, agent: dict) -> Path:
    path = tmp_path / "agents.yml"
    path.write_text(yaml.safe_dump({"agents": {"a": agent}}))
    return path


def test_servers_resolve_with_cwd_relative_to_the_spec_file(tmp_path: Path):
    spec = resolve_agent(
        write(
            tmp_path,
            {
                "mcp_servers": {
                    "notes": {"command": "python -m notes_server --flag", "cwd": "srv"},
                    "web": {"url": "https://example.com/mcp", "headers": {"X-Key": "${KEY}"}},
                    "local": {"command": ["node", "server.js"]},
                }
            },
        ),
        "a",
        "m",
    )
    notes, web, local = (spec.mcp_servers[n] for n in ("notes", "web", "local"))
    assert notes.command == ["python", "-m", "notes_server", "--flag"]
    assert notes.cwd == str((tmp_path / "srv").resolve())
    assert local.cwd == str(tmp_path.resolve())
    assert web.cwd is None and web.headers == {"X-Key": "${KEY}"}


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ({}, "mcp_servers.s: Value error, give exactly one of `command`"),
        ({"command": ["x"], "url": "http://h/mcp"}, "give exactly one of"),
        ({"url": "ftp://h/mcp"}, "must start with http:// or https://"),
        ({"url": "http://h/mcp", "env": {"A": "b"}}, "`env` and `cwd` apply to stdio servers"),
        ({"command": ["x"], "headers": {"A": "b"}}, "`headers` apply to HTTP servers"),
        ({"command": ["x"], "timeout_seconds": 0}, "mcp_servers.s.timeout_seconds"),
        ({"command": ["x"], "risk": "maybe"}, "mcp_servers.s.risk"),
        ({"command": ["x"], "surprise": 1}, "mcp_servers.s.surprise: Extra inputs"),
        ({"command": []}, "mcp_servers.s.command"),
    ],
)
def test_invalid_server_entries_name_the_field(tmp_path: Path, server: dict, message: str):
    with pytest.raises(SpecError) as e:
        resolve_agent(write(tmp_path, {"mcp_servers": {"s": server}}), "a", "m")
    assert message in str(e.value)
    assert str(e.value).startswith("agents.a.mcp_servers")


@pytest.mark.parametrize("name", ["a__b", "_a", "a.b", "", "x" * 33, "a b"])
def test_server_names_that_cannot_prefix_tool_names_are_refused(tmp_path: Path, name: str):
    with pytest.raises(SpecError, match="agents.a.mcp_servers: Value error, MCP server name"):
        resolve_agent(write(tmp_path, {"mcp_servers": {name: {"command": ["x"]}}}), "a", "m")


def test_tool_entries_with_a_task_queue(tmp_path: Path):
    spec = resolve_agent(
        write(tmp_path, {"tools": ["read_file", {"name": "shell", "task_queue": "sandbox"}]}),
        "a",
        "m",
    )
    assert spec.tools == ["read_file", "shell"]
    assert spec.tool_names() == ["read_file", "shell"]
    assert spec.tool_queues == {"shell": "sandbox"}


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ([{"name": "shell", "queue": "x"}], "agents.a.tools.0."),
        ([{"task_queue": "x"}], "agents.a.tools.0."),
        ([{"name": "shell", "task_queue": "has space"}], "agents.a.tools.0."),
        (["shell", {"name": "shell", "task_queue": "q"}], "tool names must be unique"),
    ],
)
def test_invalid_tool_entries_name_the_field(tmp_path: Path, tools: list, message: str):
    with pytest.raises(SpecError) as e:
        resolve_agent(write(tmp_path, {"tools": tools}), "a", "m")
    assert message in str(e.value)


def test_policy_may_name_mcp_tools_with_a_dot(tmp_path: Path):
    spec = resolve_agent(
        write(
            tmp_path,
            {
                "mcp_servers": {"fs": {"command": ["x"]}},
                "policy": {
                    "tools": {
                        "fs.write-file": {"action": "approve"},
                        "fs__read": {"action": "allow"},
                        "other.thing": {"action": "deny"},
                    }
                },
            },
        ),
        "a",
        "m",
    )
    assert set(spec.policy.tools) == {"fs__write-file", "fs__read", "other.thing"}


def test_tool_names_offered_to_the_model():
    assert tool_name("fs", "read_file") == "fs__read_file"
    assert tool_name("fs", "files/read.v2") == "fs__files_read_v2"
    assert len(tool_name("fs", "x" * 100)) == 64
    known = {"fs__read_file", "calculator"}
    assert canonical_tool_name("fs.read_file", known) == "fs__read_file"
    assert canonical_tool_name("fs__read_file", known) == "fs__read_file"
    assert canonical_tool_name("fs.unknown", known) == "fs.unknown"  # reported as unknown
    assert canonical_tool_name("calculator", known) == "calculator"


def test_variables_expand_on_the_worker_and_are_listed_for_redaction():
    server = McpServerConfig(
        name="s",
        command=["python", "srv.py", "--token=${TOKEN}"],
        env={"A": "${A_VAR}", "B": "plain"},
    )
    assert referenced_vars(server) == ["A_VAR", "TOKEN"]
    assert expand("x-${A}-${B}", {"A": "1", "B": "2"}) == "x-1-2"
    with pytest.raises(McpConfigError, match="MISSING is not set on this worker"):
        expand("${MISSING}", {})
    assert stdio_argv(server.model_copy(update={"command": ["python", "srv.py"]})) == [
        sys.executable,
        "srv.py",
    ]


def test_pool_key_ignores_the_name_only():
    a = McpServerConfig(name="a", command=["x"], env={"K": "v"})
    assert pool_key(a) == pool_key(a.model_copy(update={"name": "b"}))
    assert pool_key(a) != pool_key(a.model_copy(update={"env": {"K": "w"}}))


def test_result_text_joins_blocks_and_falls_back_to_structured_content():
    result = CallToolResult(
        content=[
            TextContent(type="text", text="one"),
            ImageContent(type="image", data="AAAA", mime_type="image/png"),
        ]
    )
    assert result_text(result) == "one\n[image: image/png]"
    assert result_text(CallToolResult(content=[], structured_content={"n": 1})) == '{"n": 1}'
