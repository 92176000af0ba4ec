"""Context-compaction planning over a chat transcript. Pure and deterministic.

No I/O, no clocks, no randomness: this runs inside workflow code. Token counts come from the
``tokens.count`` activity (``TokenCounts.per_message`` / ``.tools``); this module only decides.

Units
    The transcript (OpenAI chat format) is cut into *units* that are kept or dropped whole:

    * each leading ``system`` message (the *head*): always kept;
    * an ``assistant`` message with ``tool_calls`` together with every ``tool`` message answering
      one of its calls (matched by ``tool_call_id``; a ``tool`` message without a matching id joins
      the tool-call unit right before it), so a call is never separated from its result;
    * every other message on its own.

Pinned units (never dropped)
    the head; the first ``user`` message (the task); the latest ``user`` message that is not a
    compaction summary (the current request, in chat mode); the most recent unit (the one
    holding the last message: the latest user message, or the latest call with its results).

Budgets, in tokens
    ``usable = context_window - output_reserve``; compaction is needed when
    ``sum(per_message_tokens) + tools_tokens > budget = floor(threshold * usable)``. Units are then
    dropped oldest first until the total is at most ``target = floor(target_ratio * budget)``
    (``target_ratio`` 0.75 by default, i.e. 0.6 of the usable window at the default threshold 0.8),
    so that the next few turns fit without compacting again. When dropping every unpinned unit
    still leaves more than ``budget``, the plan says ``fits=False``: the caller can then shorten
    tool results with :func:`truncate_tool_results` and count again.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from pydantic import BaseModel, Field

from activities.rules import token_upper_bound

__all__ = [
    "DEFAULT_TARGET_RATIO",
    "SUMMARY_PREFIX",
    "CompactionPlan",
    "plan_compaction",
    "summary_request",
    "token_upper_bound",
    "transcript_units",
    "truncate_tool_results",
]

DEFAULT_TARGET_RATIO = 0.75
"""Fraction of the threshold budget that compaction aims for (0.75 * 0.8 = 0.6 of usable)."""

SUMMARY_PREFIX = "[Summary of earlier conversation]\n"
"""Start of the ``user`` message that :meth:`CompactionPlan.apply` inserts for a summary."""


TRUNCATION_MARKER = "\n[... truncated {n} characters]"
"""Appended by :func:`truncate_tool_results` to a shortened tool result."""


def _is_tool_call_message(msg: Mapping[str, Any]) -> bool:
    return msg.get("role") == "assistant" and bool(msg.get("tool_calls"))


def _mapping(value: Any) -> Mapping[str, Any] | None:
    """``value`` as a JSON object, or None when it is not a mapping."""
    return cast("Mapping[str, Any]", value) if isinstance(value, Mapping) else None


def _call_ids(msg: Mapping[str, Any]) -> list[str]:
    ids: list[str] = []
    calls: Iterable[Any] = msg.get("tool_calls") or []
    for call in calls:
        call_map = _mapping(call)
        if call_map is not None and isinstance(call_map.get("id"), str):
            ids.append(call_map["id"])
    return ids


def _is_summary(msg: Mapping[str, Any]) -> bool:
    content = msg.get("content")
    return isinstance(content, str) and content.startswith(SUMMARY_PREFIX)


def _head_length(messages: Sequence[Mapping[str, Any]]) -> int:
    n = 0
    while n < len(messages) and messages[n].get("role") == "system":
        n += 1
    return n


def transcript_units(messages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """Cut a transcript into units that compaction keeps or drops whole.

    Returns:
        Lists of message indices, each ascending, ordered by their first index; together they
        cover every index exactly once. See the module docstring for the rules.
    """
    units: list[list[int]] = []
    unit_of_call: dict[str, int] = {}
    unit_of_message: list[int] = []
    for i, msg in enumerate(messages):
        u: int | None = None
        if msg.get("role") == "tool":
            call_id = msg.get("tool_call_id")
            if isinstance(call_id, str) and call_id in unit_of_call:
                u = unit_of_call[call_id]
            elif i > 0 and _is_tool_call_message(messages[units[unit_of_message[i - 1]][0]]):
                u = unit_of_message[i - 1]
        if u is None:
            u = len(units)
            units.append([])
            if _is_tool_call_message(msg):
                for call_id in _call_ids(msg):
                    unit_of_call.setdefault(call_id, u)
        units[u].append(i)
        unit_of_message.append(u)
    return units


class CompactionPlan(BaseModel):
    """What to keep of a transcript that exceeds its token budget.

    Indices refer to the messages :func:`plan_compaction` was given. Token figures include the
    tool schemas' tokens; ``tokens_after`` also includes ``summary_reserve``.
    """

    keep: list[int] = Field(description="indices of kept messages, ascending")
    dropped: list[int] = Field(description="indices of dropped messages, ascending")
    tokens_before: int = Field(description="tokens of the whole transcript and the tool schemas")
    tokens_after: int = Field(description="tokens of the kept messages, tool schemas, reserve")
    budget: int = Field(description="floor(threshold * (context_window - output_reserve))")
    target: int = Field(description="what dropping aimed for: floor(target_ratio * budget)")
    fits: bool = Field(description="tokens_after <= budget")

    def apply(
        self, messages: Sequence[Mapping[str, Any]], summary: str | None = None
    ) -> list[dict[str, Any]]:
        """The compacted transcript: kept messages in order, plus an optional summary message.

        The summary goes in as one ``user`` message, ``SUMMARY_PREFIX + summary``, at the place
        of the first dropped message (right after the system prompt and the task). A ``user``
        message rather than a ``system`` one because many open-model chat templates (Qwen,
        Llama, Mistral) accept a system message only at the start. Messages are shallow copies.

        Raises:
            ValueError: ``messages`` is not the transcript the plan was made for (length differs).
        """
        n = len(self.keep) + len(self.dropped)
        if len(messages) != n:
            raise ValueError(f"plan is for {n} messages, got {len(messages)}")
        out = [dict(messages[i]) for i in self.keep]
        if summary and self.dropped:
            first_dropped = self.dropped[0]
            at = sum(1 for i in self.keep if i < first_dropped)
            out.insert(at, {"role": "user", "content": SUMMARY_PREFIX + summary.strip()})
        return out


def plan_compaction(
    messages: Sequence[Mapping[str, Any]],
    per_message_tokens: Sequence[int],
    tools_tokens: int,
    context_window: int,
    output_reserve: int,
    threshold: float,
    *,
    target_ratio: float = DEFAULT_TARGET_RATIO,
    summary_reserve: int = 0,
) -> CompactionPlan | None:
    """Plan which whole units of a transcript to drop so that it fits its token budget.

    Args:
        messages: the transcript, OpenAI chat format.
        per_message_tokens: tokens of each message (``TokenCounts.per_message``), same order.
        tools_tokens: tokens of the tool schemas (``TokenCounts.tools``).
        context_window: the model's context window, tokens.
        output_reserve: tokens kept free for the reply.
        threshold: fraction of the usable window (``context_window - output_reserve``) above
            which to compact, in ``(0, 1]``.
        target_ratio: fraction of the threshold budget to aim for when dropping, in ``(0, 1]``.
        summary_reserve: tokens set aside for the summary ``apply`` may insert (counted in
            ``tokens_after`` when anything is dropped).

    Returns:
        ``None`` when ``sum(per_message_tokens) + tools_tokens <= budget``; otherwise a
        :class:`CompactionPlan` (``fits=False`` when even the pinned units exceed the budget; it
        then drops every unpinned unit).

    Raises:
        ValueError: lengths differ, a negative count, ``output_reserve >= context_window``, or
            ``threshold`` / ``target_ratio`` outside ``(0, 1]``.
    """
    _check_plan_args(messages, per_message_tokens, tools_tokens, context_window, output_reserve)
    if not 0 < threshold <= 1 or not 0 < target_ratio <= 1 or summary_reserve < 0:
        raise ValueError(
            f"threshold ({threshold}) and target_ratio ({target_ratio}) must be in (0, 1], "
            f"summary_reserve ({summary_reserve}) >= 0"
        )
    budget = math.floor(threshold * (context_window - output_reserve))
    total = sum(per_message_tokens) + tools_tokens
    if total <= budget:
        return None
    target = math.floor(target_ratio * budget)
    units = transcript_units(messages)
    dropped_units, after = _drop_oldest(
        units, _pinned_units(messages, units), per_message_tokens, total, target, summary_reserve
    )
    dropped = sorted(i for u in dropped_units for i in units[u])
    return CompactionPlan(
        keep=sorted(set(range(len(messages))) - set(dropped)),
        dropped=dropped,
        tokens_before=total,
        tokens_after=after,
        budget=budget,
        target=target,
        fits=after <= budget,
    )


def _drop_oldest(
    units: list[list[int]],
    pinned: set[int],
    per_message_tokens: Sequence[int],
    total: int,
    target: int,
    summary_reserve: int,
) -> tuple[list[int], int]:
    """Drop unpinned units oldest first until the rest (and a summary) fit ``target``."""
    dropped_units: list[int] = []
    after = total  # > budget >= target: at least one unit is tried
    for u, idxs in enumerate(units):
        if dropped_units and after + summary_reserve <= target:
            break
        if u in pinned:
            continue
        dropped_units.append(u)
        after -= sum(per_message_tokens[i] for i in idxs)
    if dropped_units:
        after += summary_reserve
    return dropped_units, after


def _check_plan_args(
    messages: Sequence[Mapping[str, Any]],
    per_message_tokens: Sequence[int],
    tools_tokens: int,
    context_window: int,
    output_reserve: int,
) -> None:
    if len(per_message_tokens) != len(messages):
        raise ValueError(f"{len(per_message_tokens)} token counts for {len(messages)} messages")
    if any(t < 0 for t in per_message_tokens) or tools_tokens < 0:
        raise ValueError("token counts must not be negative")
    if output_reserve < 0 or context_window <= output_reserve:
        raise ValueError(
            f"output_reserve ({output_reserve}) must be >= 0 and below context_window "
            f"({context_window})"
        )


def _pinned_units(messages: Sequence[Mapping[str, Any]], units: list[list[int]]) -> set[int]:
    """Units never dropped: the head (system prompt), the task, the latest request, the last."""
    unit_of = {i: u for u, idxs in enumerate(units) for i in idxs}
    pinned: set[int] = {unit_of[i] for i in range(_head_length(messages))}
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if users:
        pinned.add(unit_of[users[0]])
    requests = [i for i in users if not _is_summary(messages[i])]
    if requests:
        pinned.add(unit_of[requests[-1]])
    if messages:
        pinned.add(unit_of[len(messages) - 1])  # the most recent unit
    return pinned


def truncate_tool_results(
    messages: Sequence[Mapping[str, Any]], max_chars: int
) -> list[dict[str, Any]]:
    """Shorten every ``tool`` message whose text content exceeds ``max_chars`` characters.

    A shortened content keeps its first ``max_chars`` characters followed by
    a line ``[... truncated N characters]`` (``N`` = characters removed). Other messages, and tool
    messages whose content is not a string, are copied unchanged. The input is not modified.

    Raises:
        ValueError: ``max_chars`` is negative.
    """
    if max_chars < 0:
        raise ValueError("max_chars must not be negative")
    out: list[dict[str, Any]] = []
    for msg in messages:
        copy = dict(msg)
        content = copy.get("content")
        if copy.get("role") == "tool" and isinstance(content, str) and len(content) > max_chars:
            cut = len(content) - max_chars
            copy["content"] = content[:max_chars] + TRUNCATION_MARKER.format(n=cut)
        out.append(copy)
    return out


SUMMARY_INSTRUCTION = (
    "You write summaries of conversations between a user, an AI assistant and the assistant's "
    "tools. The part of the conversation below is being removed from the assistant's context "
    "window to free space; your summary replaces it. Write a concise summary, at most about 250 "
    "words, of what matters for continuing the task: facts learned, decisions taken, names of "
    "files, paths, identifiers and values found, tool results that matter, errors met, and what "
    "remains to do. Keep it factual; do not invent anything or address the user. Plain text."
)
"""System instruction of the summary step."""


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in cast("list[Any]", content):
            obj = _mapping(part)
            if obj is not None and obj.get("type") == "text":
                parts.append(str(obj.get("text", "")))
            elif obj is not None:
                parts.append(f"[{obj.get('type', 'part')}]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


def _render(msg: Mapping[str, Any], per_message_chars: int) -> str:
    role = str(msg.get("role", "?"))
    lines: list[str] = []
    text = _content_text(msg.get("content"))
    if role == "tool":
        name = f" {msg['name']}" if msg.get("name") else ""
        label = f"tool result{name} ({msg.get('tool_call_id', '')})"
        lines.append(f"[{label}]\n{_clip(text, per_message_chars)}")
    elif text:
        lines.append(f"[{role}]\n{_clip(text, per_message_chars)}")
    calls: Iterable[Any] = msg.get("tool_calls") or []
    for call in calls:
        call_map = _mapping(call)
        found = _mapping(call_map.get("function") if call_map is not None else None)
        fn: Mapping[str, Any] = found if found is not None else {}
        args = fn.get("arguments", "")
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        call_id = call_map.get("id", "") if call_map is not None else ""
        lines.append(
            f"[{role} calls tool {fn.get('name', '?')} ({call_id})]\n"
            f"{_clip(args, per_message_chars)}"
        )
    return "\n".join(lines)


def summary_request(
    dropped_messages: Sequence[Mapping[str, Any]],
    *,
    max_chars: int = 24_000,
    per_message_chars: int = 2_000,
) -> list[dict[str, Any]]:
    """The messages for a model step that summarises what compaction drops.

    Args:
        dropped_messages: the dropped messages, in transcript order (``[messages[i] for i in
            plan.dropped]``). A previous summary among them is summarised again.
        max_chars: cap on the rendered transcript, characters; beyond it the middle is cut.
        per_message_chars: cap on each message's rendered content (and each call's arguments).

    Returns:
        ``[{"role": "system", "content": SUMMARY_INSTRUCTION}, {"role": "user", "content": ...}]``
        where the user message holds the dropped messages rendered as ``[role]`` blocks.
    """
    rendered = "\n\n".join(
        block for block in (_render(m, per_message_chars) for m in dropped_messages) if block
    )
    body = _clip(rendered, max_chars) if rendered else "(nothing)"
    return [
        {"role": "system", "content": SUMMARY_INSTRUCTION},
        {
            "role": "user",
            "content": "Summarise this part of the conversation:\n\n"
            f"<conversation>\n{body}\n</conversation>",
        },
    ]
