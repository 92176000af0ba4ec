"""An MCP server over HTTP that answers with more than the worker should hold
(activities/http_cap.py, ``McpPool(max_http_reply_bytes=...)``, activities/mcp/tools.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from activities.contracts import InvokeToolInput, McpServerConfig, McpTarget
from activities.mcp.pool import McpPool
from activities.mcp.tools import invoke_mcp
from tests.support.mcp import http_server

MIB = 1024 * 1024


@pytest.fixture
def hostile_url() -> Iterator[str]:
    """tests/support/mcp_hostile_server.py over streamable HTTP."""
    with http_server(module="tests.support.mcp_hostile_server") as (url, _proc):
        yield url


def _call(url: str, tool: str, arguments: str) -> InvokeToolInput:
    server = McpServerConfig(name="h", url=url)
    return InvokeToolInput(
        run_id="run-1",
        turn=1,
        call_id="call-1",
        name=f"h__{tool}",
        arguments=arguments,
        workspace=".",
        mcp=McpTarget(server=server, tool=tool),
    )


async def test_a_reply_past_the_cap_is_a_tool_error_naming_it_and_the_server_still_serves(
    hostile_url: str,
):
    pool = McpPool(max_http_reply_bytes=MIB)
    out = await invoke_mcp(pool, _call(hostile_url, "flood", '{"mb": 8}'), 30)
    assert out.status == "error"
    assert "MCP server h's reply went past 1048576 bytes; the rest was not read" in out.content
    out = await invoke_mcp(pool, _call(hostile_url, "whoami", "{}"), 30)
    assert out.status == "ok" and out.content.isdigit()
    # under the cap, a large reply is read and cut to the call's output limit as before
    out = await invoke_mcp(pool, _call(hostile_url, "flood", '{"mb": 0}'), 30)
    assert out.status == "ok"
