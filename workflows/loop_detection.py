"""Loop detection over the tool calls of recent turns. Pure and deterministic.

A turn's *signature* is the sorted list of its tool calls as ``(name, canonical JSON arguments)``.
A run is looping when, within the last ``window`` turns,

* one signature occurs ``repeats`` times (``A ... A ... A``), or
* the most recent turns end in a cycle of length ``p >= 2`` repeated twice (``A B A B``,
  ``A B C A B C``).

This is the same idea as the sliding-window repeat check of the seed designs; the thresholds
come from the agent spec (``limits.loop_window``, ``limits.loop_repeats``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

Signature = tuple[tuple[str, str], ...]


def canonical_arguments(arguments: str | dict[str, Any]) -> str:
    """Canonical JSON text of tool arguments (keys sorted); unparsable text is kept as is.

    Text that is not JSON or is nested deeper than the interpreter's recursion limit
    (``RecursionError`` from ``json.loads``) counts as unparsable: stripped, never an exception.
    A dict too deep to write back as JSON is its ``repr`` cut at 10,000 characters.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return arguments.strip()
    try:
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):
        return _shallow_text(arguments)


def _shallow_text(value: Any) -> str:
    """Deterministic text of a value ``json.dumps`` cannot write (nested too deeply)."""
    try:
        return repr(value)[:10_000]
    except RecursionError:
        return f"<{type(value).__name__} nested too deeply>"


def turn_signature(calls: Sequence[tuple[str, str | dict[str, Any]]]) -> Signature:
    """Signature of one turn from ``(tool name, arguments)`` pairs."""
    return tuple(sorted((name, canonical_arguments(args)) for name, args in calls))


def detect_loop(history: Sequence[Signature], window: int, repeats: int) -> str | None:
    """Return a description of the loop when ``history`` (oldest first) ends in one, else None.

    Args:
        history: signatures of the turns that called tools, oldest first.
        window: how many recent turns to examine.
        repeats: how many identical turns within the window make a loop (>= 2).
    """
    recent = [s for s in history[-window:] if s]
    if not recent:
        return None
    last = recent[-1]
    count = Counter(recent)[last]
    if count >= repeats:
        return f"the same tool calls {_describe(last)} recurred {count} times in the last {window} turns"
    for p in range(2, len(recent) // 2 + 1):
        tail = recent[-2 * p :]
        if tail[:p] == tail[p:] and len(set(tail[:p])) > 1:
            cycle = " -> ".join(_describe(s) for s in tail[:p])
            return f"the tool calls alternate in a cycle of {p} turns: {cycle}"
    return None


def _describe(sig: Signature) -> str:
    return "[" + ", ".join(f"{name}({args})" for name, args in sig) + "]"
