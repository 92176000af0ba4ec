"""What a running tool knows of its call: :class:`ToolContext`, injected by the registry.

:mod:`activities.tools.registry` re-exports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ToolContext"]


def _no_heartbeat(*details: Any) -> None:
    return None


@dataclass
class ToolContext:
    """What a running tool knows of its call. Injected into a parameter annotated ``ToolContext``.

    ``workspace`` is the absolute root the workspace tools are confined to (made absolute and
    resolved on creation). ``heartbeat(*details)`` tells Temporal a long tool is still alive;
    it is a no-op outside an activity.

    ``idempotency_key`` is ``<workflow id>/<tool_call_id>``: the same for every attempt of one
    tool call (Temporal retries, a worker killed mid-call, continue-as-new) and different for
    every other call. Temporal runs a call at least once, so a tool with side effects uses it to
    apply them once: pass it to an API that deduplicates (an ``Idempotency-Key`` header), or wrap
    the effect in :func:`activities.tools.ledger.run_once` as ``write_file`` does. It is ``""``
    when the tool is called outside an activity.
    """

    workspace: Path
    run_id: str = ""
    turn: int = 0
    call_id: str = ""
    tenant_id: str = "default"
    principal_id: str = "anonymous"
    heartbeat: Callable[..., None] = _no_heartbeat
    idempotency_key: str = ""
    run_files: dict[str, str] = field(default_factory=dict[str, str])
    """Files earlier calls of the run wrote (name -> payload store key), for sandboxed tools."""
    new_files: dict[str, str] = field(default_factory=dict[str, str])
    """Files this call wrote (name -> payload store key): the outcome's ``files``."""
    callback: Callable[[], str] | None = None
    """Makes this call's callback URL (set by ``tool.invoke`` on a worker with callbacks)."""

    def callback_url(self) -> str:
        """A URL an outside system POSTs this call's result to, signed for this call only.

        A tool marked ``@tool(callback=True)`` hands it over, then calls
        ``temporalio.activity.raise_complete_async()``: the call finishes when the outside
        system sends ``POST <url>`` with ``{"result": ...}`` or ``{"error": "..."}`` (served by
        ``agentctl serve``, docs/tools.md), or times out after the tool's ``timeout_seconds``.
        The URL is ``<AGENT_CALLBACK_URL>/callbacks/<token>``; the token (HMAC-SHA256 under the
        runtime's callback key, activities/callbacks.py) expires with this attempt and works
        once.

        Raises:
            ToolError: not in an activity of a worker that signs callbacks.
        """
        if self.callback is None:
            from activities.tools.errors import ToolError

            raise ToolError("this tool call cannot be finished by a callback here")
        return self.callback()

    def __post_init__(self) -> None:
        self.workspace = Path(self.workspace).expanduser().resolve()
