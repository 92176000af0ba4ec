"""The errors of tools: what the model reads back (:class:`ToolError`) and what a worker reports.

A tool raises :class:`ToolError` for anything the model should read and act on (bad path, file
exists, ...); any other exception is an infrastructure error that Temporal retries.
:mod:`activities.tools.registry` re-exports every name.
"""

from __future__ import annotations

__all__ = ["ToolArgumentsError", "ToolError", "ToolModuleImportError", "UnknownToolError"]


class ToolError(Exception):
    """A business error of a tool: its message is sent back to the model, nothing is retried."""


class ToolArgumentsError(ToolError):
    """The arguments of a call are not valid JSON, not an object, or do not match the schema."""


class UnknownToolError(ToolError):
    """No tool of that name is registered; the message names the available tools."""


class ToolModuleImportError(ImportError):
    """A configured tool module could not be imported; ``name`` is the module's name."""
