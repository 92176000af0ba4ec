"""A real MCP server for the tests, written with the official SDK (``MCPServer``, ex-FastMCP).

Run as ``python -m tests.support.mcp_server stdio`` (the worker starts it) or
``python -m tests.support.mcp_server http --port P`` (the test starts it on a free port).
Every call is appended to ``$MCP_TEST_JOURNAL`` (one JSON line: tool, pid, the request's ``_meta``),
which is where tests read what really ran and in which process.

Tools: ``echo`` (read-only), ``add``, ``fail`` (a tool error: ``isError``), ``whoami`` (the pid),
``getenv`` (a variable of the server's environment), ``add_extra`` (adds the tool ``extra`` at
run time, so the server's list changes).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("test-tools")


def _journal(tool: str, ctx: Context | None, **extra: Any) -> dict[str, Any]:
    meta = dict(ctx.request_context.meta or {}) if ctx is not None else {}
    entry = {"tool": tool, "pid": os.getpid(), "ppid": os.getppid(), "meta": meta, **extra}
    path = os.environ.get("MCP_TEST_JOURNAL")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, default=str) + "\n")
    return entry


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str, ctx: Context) -> str:
    """Echo the text back, with the idempotency key the client sent.

    Args:
        text: what to echo.
    """
    entry = _journal("echo", ctx, text=text)
    return f"echo: {text} (key={entry['meta'].get('idempotency_key', '')})"


@server.tool()
def add(a: int, b: int, ctx: Context) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    _journal("add", ctx, a=a, b=b)
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def fail(reason: str, ctx: Context) -> str:
    """Always fail with a tool error.

    Args:
        reason: the error text.
    """
    _journal("fail", ctx, reason=reason)
    raise ToolError(f"refused: {reason}")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami(ctx: Context) -> str:
    """The server's process id."""
    _journal("whoami", ctx)
    return str(os.getpid())


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def getenv(name: str) -> str:
    """The value of one of the server's environment variables (to test redaction).

    Args:
        name: the variable.
    """
    return os.environ.get(name, "")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def crash_once(marker: str, ctx: Context) -> str:
    """Kill this server in the middle of the call the first time (``marker`` does not exist yet).

    Args:
        marker: a file path; created before the crash.
    """
    _journal("crash_once", ctx, marker=marker)
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return "survived"


def extra() -> str:
    """A tool added after the server started."""
    return "extra"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add_extra() -> str:
    """Add the tool ``extra`` to this server (its tool list changes)."""
    if "extra" not in {t.name for t in server._tool_manager.list_tools()}:
        server.add_tool(extra, annotations=ToolAnnotations(read_only_hint=True))
    return "added"


def main(argv: list[str] | None = None) -> None:
    """Serve over stdio or streamable HTTP (``/mcp``) on 127.0.0.1."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("transport", choices=["stdio", "http"])
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args(argv)
    if a.transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=a.port)


if __name__ == "__main__":
    main()
