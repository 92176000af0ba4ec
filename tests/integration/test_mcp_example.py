"""The example MCP server (workers/local/mcp_example_server.py) as agent ``mcp-demo`` has it."""

from __future__ import annotations

import shutil
from pathlib import Path

from activities.contracts import InvokeToolInput
from activities.mcp.pool import McpPool
from activities.mcp.tools import invoke_mcp, pin_server_tools
from activities.spec import resolve_agent
from tests.support.mcp import REPO


async def test_mcp_demo_agent_server_pins_its_tools_and_deduplicates_by_key(tmp_path: Path):
    shutil.copy(REPO / "agents" / "agents.yml", tmp_path / "agents.yml")
    (tmp_path / "ws").mkdir()
    spec = resolve_agent(tmp_path / "agents.yml", "mcp-demo", "m")
    # PYTHONPATH: the server module of this checkout, whichever checkout the installed package
    # points at (a stdio server gets only the SDK's default environment plus its `env`)
    env = {**spec.mcp_servers["notes"].env, "PYTHONPATH": str(REPO)}
    server = spec.mcp_servers["notes"].model_copy(update={"cwd": str(tmp_path / "ws"), "env": env})
    pool = McpPool()
    try:
        tools = await pin_server_tools(pool, "notes", server)
        assert [t.name for t in tools] == [
            "notes__add_note",
            "notes__list_notes",
            "notes__read_note",
        ]
        assert [t.risk for t in tools] == ["write", "read", "read"]
        assert spec.policy.tools["notes__add_note"].action == "allow"

        def call(name: str, args: dict, call_id: str) -> InvokeToolInput:
            info = next(t for t in tools if t.name == name)
            return InvokeToolInput(
                run_id="run-x",
                turn=1,
                call_id=call_id,
                name=name,
                arguments=args,
                workspace=str(tmp_path),
                mcp=info.mcp,
            )

        args = {"title": "shopping", "text": "milk, eggs"}
        first = await invoke_mcp(pool, call("notes__add_note", args, "c1"), None)
        again = await invoke_mcp(pool, call("notes__add_note", args, "c1"), None)  # a retry
        listed = await invoke_mcp(pool, call("notes__list_notes", {}, "c2"), None)
        missing = await invoke_mcp(pool, call("notes__read_note", {"title": "x"}, "c3"), None)
    finally:
        await pool.aclose()
    assert (first.status, first.content) == ("ok", "saved note 'shopping' (10 characters)")
    assert again.content == "note 'shopping' was already saved by this call"
    assert listed.content == "shopping"
    assert missing.status == "error" and "no note titled 'x'" in missing.content
    assert (tmp_path / "ws" / "notes.json").exists()
    assert pool.running() == 0
