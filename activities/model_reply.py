"""What a model server reports, made safe to keep: bounded usage counts, encodable arguments.

A model server is not trusted: its usage counts are bounded (:func:`token_count`), tool-call
arguments are made encodable (:func:`without_lone_surrogates`) and a reply may ask for at most
:data:`MAX_TOOL_CALLS` calls (:func:`check_tool_calls`), for plain replies
(:mod:`activities.model`) and streamed ones (:class:`activities.streaming.ReplyAssembler`) alike.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

MAX_REPORTED_TOKENS = 10**12
"""Most tokens one count of a reply's ``usage`` may say; more is taken as this many.

The run adds usage up into search attribute ``TotalTokens`` (a signed 64-bit integer on the
server): a server that reported 2e20 tokens failed every workflow task of the run after it."""
MAX_TOOL_CALLS = 128
"""Tool calls one reply may ask for. Measured (tests/integration/test_model_limits.py): a reply
of 10,000 calls failed every workflow task of its run (the task ran past the deadlock detector's
2 s emitting their events); 1,000 passed. Models ask for a few at a time."""
_SURROGATE = re.compile("[\ud800-\udfff]")


class TooManyToolCalls(ValueError):
    """A reply asked for more than :data:`MAX_TOOL_CALLS` tool calls (unusable model output)."""


def check_tool_calls(count: int) -> None:
    """Raise :class:`TooManyToolCalls` when a reply's ``count`` of tool calls is over the limit."""
    if count > MAX_TOOL_CALLS:
        raise TooManyToolCalls(
            f"the reply asks for {count} tool calls; one step may make at most {MAX_TOOL_CALLS}"
        )


def token_count(value: Any) -> int:
    """A usage count as the run keeps it: an int in ``[0, MAX_REPORTED_TOKENS]``.

    A number (or numeric text) is truncated and clamped; anything else, negative or missing is 0.
    """
    try:
        number = int(float(value or 0))
    except (TypeError, ValueError, OverflowError):
        return 0
    return min(max(number, 0), MAX_REPORTED_TOKENS)


def cached_prompt_count(usage: Any, timings: object, prompt_tokens: int) -> int:
    """Prompt tokens the endpoint served from its prompt cache, as :func:`token_count` keeps them.

    ``usage`` is the reply's usage object: OpenAI's ``prompt_tokens_details.cached_tokens``
    (https://platform.openai.com/docs/guides/prompt-caching) when present; else ``timings`` (a
    dict, llama.cpp's extra reply field) and its ``cache_n``, the prompt tokens its slot reused
    (llama.cpp tools/server/README.md, "timings"). Never more than ``prompt_tokens``; 0 when
    neither says.
    """
    details = getattr(usage, "prompt_tokens_details", None)
    if isinstance(details, dict):
        value: Any = cast("dict[str, Any]", details).get("cached_tokens")
    else:
        value = getattr(details, "cached_tokens", None)
    if value is None and isinstance(timings, dict):
        value = cast("dict[str, Any]", timings).get("cache_n")
    return min(token_count(value), prompt_tokens)


def without_lone_surrogates(arguments: str) -> str:
    r"""The model's arguments text with each lone UTF-16 surrogate replaced by U+FFFD.

    A lone surrogate (raw, or a JSON escape such as ``\ud800`` with no partner) cannot be
    encoded as UTF-8, so the run could not record or show the call (every workflow task failed).
    Text without one is returned unchanged; so is text that is not JSON (the run reports that).
    """
    text = _SURROGATE.sub("\ufffd", arguments)
    if "\\u" not in text:
        return text
    try:
        decoded = json.dumps(json.loads(text), ensure_ascii=False)
    except (ValueError, RecursionError):
        return text
    return _SURROGATE.sub("\ufffd", decoded) if _SURROGATE.search(decoded) else text
