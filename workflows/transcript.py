"""The run's transcript: owner of the run state's ``transcript`` part.

The only module that changes :class:`workflows.run_parts.Transcript` (``RunData.transcript``:
the messages sent to the model, the exact token counts known of them, compactions, failed
parses); the steps call the functions here. Pure: no command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workflows.models import RunData


def begin(s: RunData, messages: list[dict[str, Any]]) -> None:
    """The transcript a run starts with: ``[system, user]``, or a fork's seed messages."""
    s.transcript.messages = messages


def add(s: RunData, message: dict[str, Any]) -> None:
    """One message (``{"role", "content", ...}``, chat-completions shape) at the end."""
    s.transcript.messages.append(message)


def fill(s: RunData, messages: list[dict[str, Any]]) -> None:
    """The same messages with held calls' empty ``tool`` messages written (same list object)."""
    s.transcript.messages[:] = messages


def counted(s: RunData, token_counts: list[int], tools_tokens: int | None) -> None:
    """Exact tokens of ``messages[:len(token_counts)]`` and of the tool schemas (None: unknown)."""
    s.transcript.token_counts = token_counts
    s.transcript.tools_tokens = tools_tokens


def tools_changed(s: RunData) -> None:
    """The tool schemas changed: their tokens are counted again before the next step."""
    s.transcript.tools_tokens = None


def compacted(s: RunData, messages: list[dict[str, Any]]) -> None:
    """The transcript was compacted into ``messages``: counted afresh next time."""
    s.transcript.messages = messages
    s.transcript.token_counts = []
    s.transcript.compactions += 1


def rewritten(s: RunData, messages: list[dict[str, Any]], tools_tokens: int | None) -> None:
    """Another agent's transcript (a handoff: its system prompt); messages counted again.

    ``tools_tokens``: its tools' tokens as counted when pinned (None: counted before the next step).
    """
    s.transcript.messages = messages
    counted(s, [], tools_tokens)


def parse_failed(s: RunData) -> int:
    """One more model reply whose tool calls did not parse; returns how many so far."""
    s.transcript.parse_failures += 1
    return s.transcript.parse_failures
