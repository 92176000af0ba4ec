"""The public data of client tools: update ``tool_result``, its answer, a call waiting for it.

Names and shapes are pinned by ``docs/contract.md`` (re-exported by :mod:`workflows.models`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

__all__ = ["MAX_TOOL_RESULT_BYTES", "PendingClientTool", "ToolResultAnswer", "ToolResultUpdate"]

MAX_TOOL_RESULT_BYTES = 256 * 1024
"""Largest ``content`` of a ``tool_result`` (UTF-8 bytes): 256 KiB, for the same reason as
:data:`workflows.models.MAX_DECISION_ARGUMENTS_BYTES` (the result goes into the transcript, in history)."""


class ToolResultUpdate(BaseModel):
    """Payload of update ``tool_result``: the result of a call of a tool the client runs.

    ``content`` is the text the model reads (at most :data:`MAX_TOOL_RESULT_BYTES` of UTF-8);
    ``is_error`` marks it a failure of the tool (the call's status is then ``error``).
    ``principal_id`` is who answers: the run's own principal or, where the policy names
    approvers, one of them (the same rule as for a decision, ``roles`` included).
    """

    tool_call_id: str = Field(min_length=1)
    content: str = ""
    is_error: bool = False
    principal_id: str = "anonymous"
    roles: list[str] = Field(
        default_factory=list,
        description="the answerer's roles as their identity provider states them (as for "
        "decisions: an approver role:NAME accepts an answer naming NAME)",
    )

    @field_validator("content")
    @classmethod
    def _content_bounded(cls, value: str) -> str:
        size = len(value.encode("utf-8", "replace"))
        if size > MAX_TOOL_RESULT_BYTES:
            raise ValueError(
                f"content is {size} bytes; a tool result may carry at most {MAX_TOOL_RESULT_BYTES}"
            )
        return value


class ToolResultAnswer(BaseModel):
    """Answer of update ``tool_result``: the call it settled and its status."""

    tool_call_id: str
    status: Literal["ok", "error"]
    accepted: bool = True


class PendingClientTool(BaseModel):
    """A call of a tool the client runs, waiting for its ``tool_result`` (``state`` query).

    ``requested_at`` and ``deadline`` are ISO-8601 workflow time; past ``deadline`` the model is
    told the tool timed out. ``approvers`` are who may answer besides the run's principal
    (empty: anyone).
    """

    tool_call_id: str
    name: str
    arguments: dict[str, Any] | str
    requested_at: str
    deadline: str
    turn: int
    approvers: list[str] = Field(default_factory=list)
