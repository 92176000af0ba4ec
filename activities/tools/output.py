"""A tool's result as the text a :class:`~activities.contracts.ToolOutcome` carries.

Shared by the registry's tools (:mod:`activities.tools.registry`) and MCP tools
(:mod:`activities.mcp.tools`): whatever a tool returns becomes text (:func:`to_text`), and that
text is made safe to put in the activity's result (:func:`shape`): secrets redacted, lone UTF-16
surrogates replaced (they cannot be encoded as UTF-8, so the result could not be sent to
Temporal: the activity failed and the tool ran again), and cut to its cap.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
from collections.abc import Generator
from typing import Any

from pydantic import BaseModel

from activities import redaction

__all__ = ["UnreadableResult", "keeping_raw", "shape", "to_text"]

_RAW: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "tool_raw_output", default=None
)


@contextlib.contextmanager
def keeping_raw() -> Generator[list[str]]:
    """Within the block, :func:`shape` appends each text it gets, before redaction, to the list.

    For the ``secrets`` guardrail on tool results (activities/guardrails): it must see the values
    the runtime redacts to say which it found (and to withhold the result on ``block``).
    """
    kept: list[str] = []
    token = _RAW.set(kept)
    try:
        yield kept
    finally:
        _RAW.reset(token)


_SURROGATE = re.compile("[\ud800-\udfff]")
_BYTES_SHOWN = 4 * 1024 * 1024
"""Bytes of a ``bytes`` result decoded at most (the cut keeps far fewer characters anyway)."""


class UnreadableResult(ValueError):
    """The tool returned a value that cannot be turned into text; the message says why."""


def to_text(value: Any) -> str:
    """What a tool returned, as text for the model.

    ``str`` as it is; ``bytes``/``bytearray`` decoded as UTF-8 (undecodable bytes become U+FFFD;
    only the first 4 MiB are decoded, with a note of the full size); a pydantic model as its
    JSON; anything else as JSON, with ``str()`` of what JSON cannot hold.

    Raises:
        UnreadableResult: the value nests too deeply, refers to itself, or ``str()`` of a part
            of it failed; the message names the problem (for the model: the tool ran, so running
            it again would not help).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        head = bytes(value[:_BYTES_SHOWN]).decode("utf-8", errors="replace")
        if len(value) <= _BYTES_SHOWN:
            return head
        return head + f"\n[... {len(value)} bytes in all, the first {_BYTES_SHOWN} decoded]"
    try:
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        return json.dumps(value, default=str, ensure_ascii=False)
    except RecursionError:
        raise UnreadableResult("its result nests too deeply to be turned into text") from None
    except Exception as e:  # noqa: BLE001 - a circular reference, a __str__ that raises, ...
        raise UnreadableResult(
            f"its result cannot be turned into text ({type(e).__name__}: {str(e)[:200]})"
        ) from None


def shape(text: str, limit: int) -> tuple[str, bool, int]:
    """``text`` made fit for a tool outcome: ``(content, truncated, full length in characters)``.

    Secrets are redacted first (:func:`activities.redaction.redact`), so none is cut in half and
    leaks in part; each lone surrogate becomes U+FFFD; text longer than ``limit`` characters is
    cut to its head plus a note saying how long it was.
    """
    kept = _RAW.get()
    if kept is not None:
        kept.append(text)
    text = redaction.redact(text)
    text = _SURROGATE.sub("\ufffd", text)
    if len(text) <= limit:
        return text, False, len(text)
    note = f"\n[... output truncated: {len(text)} characters in all, {limit} shown]"
    return text[:limit] + note, True, len(text)
