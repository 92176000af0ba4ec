"""A hostile MCP server for the tests (official SDK, stdio or HTTP): floods, garbage, hangs, exits.

Run as ``python -m tests.support.mcp_hostile_server`` (stdio) or ``... http --port P``. Every call is appended to
``$MCP_TEST_JOURNAL`` (tool, pid) before it misbehaves.

Tools: ``flood`` (a text result of ``mb`` MiB), ``garbage`` (writes bytes that are not UTF-8 onto
stdout, then answers), ``hang`` (never answers, the process stays alive and serves other calls),
``freeze`` (blocks the whole server: it answers nothing more), ``vanish`` (exits mid-call),
``whoami`` (the pid).
"""

from __future__ import annotations

import json
import os
import time

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("hostile-tools")
READ = ToolAnnotations(read_only_hint=True)


def _journal(tool: str) -> None:
    path = os.environ.get("MCP_TEST_JOURNAL")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"tool": tool, "pid": os.getpid()}) + "\n")


@server.tool(annotations=READ)
def flood(mb: int) -> str:
    """A text result of ``mb`` MiB.

    Args:
        mb: mebibytes of text.
    """
    _journal("flood")
    return "z" * (mb * 1024 * 1024)


def _wire() -> int:
    """The protocol's stdout: the SDK moved fd 1 to stderr and keeps the wire on a private fd."""
    from mcp.server import stdio

    claim = stdio._claims.get(1)  # noqa: SLF001 - the test server writes past the SDK on purpose
    return claim.private_fd if claim is not None and claim.private_fd is not None else 1


@server.tool(annotations=READ)
def garbage() -> str:
    """Write bytes that are not UTF-8 onto the protocol stream, then answer."""
    _journal("garbage")
    os.write(_wire(), b"\xff\xfe\x80 not json \xc3\x28\n")
    return "answered after garbage"


@server.tool(annotations=READ)
async def hang() -> str:
    """Never answer; the server stays alive and serves other calls."""
    _journal("hang")
    await anyio.sleep_forever()
    return "never"


@server.tool(annotations=READ)
async def freeze() -> str:
    """Block the server's event loop for good: it answers nothing more, yet stays alive."""
    _journal("freeze")
    time.sleep(10**6)
    return "never"


@server.tool(annotations=READ)
def vanish() -> str:
    """Exit in the middle of the call."""
    _journal("vanish")
    os._exit(3)


@server.tool(annotations=READ)
def whoami() -> str:
    """The server's process id."""
    _journal("whoami")
    return str(os.getpid())


def main(argv: list[str] | None = None) -> None:
    """``stdio`` (the default), or ``http --port P`` (streamable HTTP on 127.0.0.1)."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("transport", nargs="?", choices=["stdio", "http"], default="stdio")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args(argv)
    if a.transport == "http":
        server.run("streamable-http", host="127.0.0.1", port=a.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
