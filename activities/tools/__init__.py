"""Tools the agent can call: the registry, ``@tool``, and the built-in tools.

Importing this package registers the built-in tools into :data:`REGISTRY`.
"""

from activities.tools import builtin, memory_tools, sandbox_tools
from activities.tools.builtin import resolve_in_workspace
from activities.tools.docstrings import parse_docstring
from activities.tools.ledger import LEDGER_DIR, run_once
from activities.tools.registry import (
    REGISTRY,
    Risk,
    ToolArgumentsError,
    ToolContext,
    ToolDef,
    ToolError,
    ToolModuleImportError,
    ToolRegistry,
    UnknownToolError,
    load_tool_modules,
    tool,
)

__all__ = [
    "LEDGER_DIR",
    "REGISTRY",
    "Risk",
    "ToolArgumentsError",
    "ToolContext",
    "ToolDef",
    "ToolError",
    "ToolModuleImportError",
    "ToolRegistry",
    "UnknownToolError",
    "builtin",
    "memory_tools",
    "sandbox_tools",
    "load_tool_modules",
    "parse_docstring",
    "resolve_in_workspace",
    "run_once",
    "tool",
]
