"""A tool the client runs, as a spec or a front end declares it (docs/tools.md).

:class:`ClientToolDef` travels in ``RunRequest.client_tools`` and ``ResolveSpecInput``;
``spec.resolve`` pins it as a :class:`activities.contracts.ToolInfo` of ``kind="client"``
(:func:`activities.client_tool_info.client_tool_info`). The run, not an activity, carries its calls out
(workflows/client_tools.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CLIENT_TOOL_TIMEOUT_SECONDS", "ClientToolDef"]

CLIENT_TOOL_TIMEOUT_SECONDS = 600.0
"""How long a run waits for a client tool's result by default: 10 minutes."""


class ClientToolDef(BaseModel):
    """A tool the client runs, as a front end declares it (``RunRequest.client_tools``).

    ``parameters`` is the JSON schema of its arguments (OpenAI function ``parameters``);
    ``timeout_seconds`` how long the run waits for its ``tool_result`` (default
    :data:`CLIENT_TOOL_TIMEOUT_SECONDS`). ``name`` follows OpenAI's function names (1-64 of
    ``A-Za-z0-9_-``, dots allowed as for MCP tools).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="the tool's name, as the model calls it",
    )
    description: str = Field(
        default="", max_length=4096, description="what the tool does, as the model reads it"
    )
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="the JSON schema of its arguments (default: no arguments)",
    )
    timeout_seconds: float = Field(
        default=CLIENT_TOOL_TIMEOUT_SECONDS,
        gt=0,
        le=7 * 24 * 3600,
        allow_inf_nan=False,
        description="how long the run waits for its tool_result, in seconds; then the model "
        "is told it timed out",
    )
