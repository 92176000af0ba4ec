"""Retrieval before a model step, inside the model activity (no Temporal round trip of its own).

:func:`retrieve` searches the step's namespaces with the last user message and returns the hits
as :class:`~activities.contracts.MemoryRef` (what the step records) plus the messages to send:
one system block ``Memory (facts remembered from earlier runs; cite ids when you use them)``
listing ``[id] text`` lines, inserted after the leading system messages. The block is cut at
``max_tokens`` (4 characters a token, the usual English estimate: OpenAI's tokenizer guide).
"""

from __future__ import annotations

from typing import Any

from activities.contracts import MemoryRef, MemoryRequest
from activities.memory.items import MemoryStore, Namespace

CHARS_PER_TOKEN = 4
HEADER = "Memory (facts remembered from earlier runs; cite their ids when you use them):"


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last user message (the query), or ``""``."""
    for m in reversed(messages):
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"]
    return ""


def retrieve(
    store: MemoryStore, req: MemoryRequest, messages: list[dict[str, Any]]
) -> tuple[list[MemoryRef], list[dict[str, Any]]]:
    """``(items given, messages with the memory block)``; no hit: ``([], messages)`` unchanged."""
    query = last_user_text(messages)
    namespaces = [Namespace(tenant_id=n.tenant_id, scope=n.scope) for n in req.namespaces]
    hits = store.search(namespaces, query, req.limit) if query.strip() else []
    budget = req.max_tokens * CHARS_PER_TOKEN - len(HEADER)
    refs: list[MemoryRef] = []
    lines: list[str] = []
    for h in hits:
        line = f"- [{h.item.id}] {h.item.text}"
        if len(line) + 1 > budget:
            break
        budget -= len(line) + 1
        lines.append(line)
        refs.append(MemoryRef(id=h.item.id, scope=h.item.namespace.scope, text=h.item.text))
    if not refs:
        return [], messages
    block = {"role": "system", "content": "\n".join([HEADER, *lines])}
    at = 0
    while at < len(messages) and messages[at].get("role") == "system":
        at += 1
    return refs, [*messages[:at], block, *messages[at:]]
