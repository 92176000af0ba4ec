"""MCP tool servers: spec entries, the worker's connection pool, pinning and calling their tools.

:mod:`activities.mcp.config`: the spec's ``mcp_servers:`` entry and tool names (light: pydantic
only, imported by the spec and by workflow code). :mod:`activities.mcp.pool`: the worker's
connections (the ``mcp`` SDK). :mod:`activities.mcp.tools`: pinning tool lists and calling tools.
"""

from activities.mcp.config import (
    McpConfigError,
    McpServerSpec,
    canonical_tool_name,
    check_server_name,
    referenced_vars,
    tool_name,
)

__all__ = [
    "McpConfigError",
    "McpServerSpec",
    "canonical_tool_name",
    "check_server_name",
    "referenced_vars",
    "tool_name",
]
