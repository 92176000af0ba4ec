"""Pure rules the workflow and the activities share (no I/O, no clock, importable by both).

The activities never import ``workflows/`` (an import-linter contract, ``make lint``); what both
sides must compute alike lives here: the upper bound of a message's tokens the workflow uses
before it counts, the clipping of event fields, and what the model is told about a tool call that
failed for good.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, cast

IMAGE_PART_TOKENS_BOUND = 1000
"""Tokens allowed per ``image_url`` content part by :func:`token_upper_bound` (the ``tokens.count``
activity counts 85, OpenAI's low-detail figure)."""
MAX_FIELD_CHARS = 4000
"""String fields of workflow-emitted events (arguments, results) are clipped to this length."""
_JSON = json.JSONEncoder(ensure_ascii=False, default=str)
"""``json.dumps(..., ensure_ascii=False, default=str)`` without building an encoder per call."""


def _mapping(value: Any) -> Mapping[str, Any] | None:
    """``value`` as a JSON object, or None when it is not a mapping."""
    return cast("Mapping[str, Any]", value) if isinstance(value, Mapping) else None


def token_upper_bound(message: Mapping[str, Any]) -> int:
    """Tokens that ``tokens.count`` can count for ``message`` at most, without an encoder.

    ``2 * bytes(JSON of the message) + 8``, plus :data:`IMAGE_PART_TOKENS_BOUND` per image part.
    Why it holds: a byte-level BPE token (tiktoken's encodings) covers at least one UTF-8 byte, so
    a string never has more tokens than bytes; ``tokens.count`` counts each value once (tool-call
    arguments re-serialised, at most twice their bytes) plus at most 4 tokens of overhead per
    message (OpenAI Cookbook, "How to count tokens"). Checked against the activity in
    ``tests/unit/test_tokens_counting.py``. The workflow uses it to skip counting while even the bound
    stays under the compaction budget.
    """
    content = message.get("content")
    images = (
        sum(
            1
            for part in cast("list[Any]", content)
            if (_mapping(part) or {}).get("type") == "image_url"
        )
        if isinstance(content, list)
        else 0
    )
    text = _JSON.encode(message)  # the bound is computed over a hundred times a run: no copies
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    return 2 * size + 8 + IMAGE_PART_TOKENS_BOUND * images


def clip(value: Any, limit: int = MAX_FIELD_CHARS) -> Any:
    """``value`` with every string longer than ``limit`` cut, marked ``...[N more chars]``.

    Lists and dicts are clipped recursively; other values are returned unchanged.
    """
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return value[:limit] + f"...[{len(value) - limit} more chars]"
    if isinstance(value, dict):
        return {k: clip(v, limit) for k, v in cast("dict[Any, Any]", value).items()}
    if isinstance(value, list):
        return [clip(v, limit) for v in cast("list[Any]", value)]
    return value


def failure_text(
    timed_out: bool,
    cancelled: bool,
    message: str,
    attempts: int,
    limit_seconds: float | None = None,
) -> tuple[Literal["cancelled", "timed_out", "error"], str]:
    """How a tool activity that failed for good ended, and what the model is told.

    Cancelled, timed out (structurally) or an error; ``limit_seconds``: the start-to-close timeout
    of one attempt, named when it ran out.
    """
    if cancelled:
        return "cancelled", f"The tool call was cancelled: {message}"
    if timed_out:
        limit = f" ({limit_seconds:g} s)" if limit_seconds else ""
        text = (
            f"The tool did not finish within its time limit{limit} and was given up after "
            f"{attempts} attempt(s): {message}"
        )
        return "timed_out", text
    return "error", f"The tool failed and was given up after {attempts} attempt(s): {message}"


def failed_status(timed_out: bool) -> Literal["timed_out", "error"]:
    """The status of a tool call that failed on every attempt: ``timed_out`` or ``error``."""
    return "timed_out" if timed_out else "error"


def tool_finished_fields(
    call_id: str,
    name: str,
    arguments: Any,
    run_arguments: dict[str, Any] | None,
    status: str,
    duration_ms: float | None,
    result: str,
    recorded: str | None = None,
) -> dict[str, Any]:
    """The fields of a ``tool_finished`` event (beside ``type`` and ``turn``), built one way.

    The workflow emits them for every call (``workflows/tool_calls.py``, ``ToolStep.finished``);
    a model step that ran held calls publishes them for a watched run
    (``activities/model_parts.py``). ``arguments`` are the model's; ``run_arguments`` (only
    when given) those the call ran with, when a person or the tool's validation changed them;
    ``recorded`` (only when given) how a replay answered the call.
    """
    fields: dict[str, Any] = {"tool_call_id": call_id, "name": name, "arguments": arguments}
    if run_arguments is not None:
        fields["run_arguments"] = run_arguments
    fields.update(status=status, duration_ms=duration_ms, result=result)
    if recorded is not None:
        fields["recorded"] = recorded
    return fields
