"""Memory items, namespaces and the :class:`MemoryStore` protocol every backend implements.

A namespace is ``(tenant_id, scope)``: the tenant first, always, set by the runtime from the run's
``tenant_id`` (never by a model), then one scope: ``user:<principal_id>``, ``agent:<agent name>`` or
``thread:<workflow id>`` (docs/contract.md, "Memory"). Backends match namespaces by exact equality
of both segments, never by pattern (LangGraph's SQL ``LIKE`` prefixes leaked across namespaces:
langchain-ai/langgraph #8300, #8214).

Items are add-only from the model's side: a new fact that contradicts an old one *supersedes* it
(the old item keeps its text and gets ``valid_to`` and ``superseded_by``); only people delete
(``agentctl memory delete``), and those deletes are real. Sources for the shape: LangGraph
``BaseStore`` (put/get/search/delete/list_namespaces, TTL), Mem0 v3 (add-only extraction).
"""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, field_validator

ScopeKind = Literal["user", "agent", "thread"]
MAX_ID_CHARS = 512
"""Longest principal, agent or thread id accepted in a scope (characters)."""


class Namespace(BaseModel):
    """``(tenant_id, scope)``; ``scope`` is ``user:<id>``, ``agent:<name>`` or ``thread:<id>``."""

    model_config = {"frozen": True}

    tenant_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    scope: str = Field(min_length=3, max_length=MAX_ID_CHARS + 8)

    @field_validator("scope")
    @classmethod
    def _kind(cls, v: str) -> str:
        kind, sep, rest = v.partition(":")
        if kind not in ("user", "agent", "thread") or not sep or not rest:
            raise ValueError("scope must be user:<id>, agent:<name> or thread:<id>")
        return v


def scope(kind: ScopeKind, ident: str) -> str:
    """``"<kind>:<ident>"``; raises ValueError for an empty or over-long ``ident``."""
    if not ident or len(ident) > MAX_ID_CHARS:
        raise ValueError(f"a {kind} id must be 1 to {MAX_ID_CHARS} characters")
    return f"{kind}:{ident}"


MAX_QUERY_CHARS = 16_000
"""Longest query the stores search with (characters): its first and last half are kept."""


def query_text(query: str) -> str:
    """``query`` as the stores search it.

    A lone surrogate (JSON's escapes allow one) is replaced by ``?``, and at most
    :data:`MAX_QUERY_CHARS` are kept, so a pasted megabyte costs no seconds to embed.
    """
    q = query.encode("utf-8", "replace").decode()
    if len(q) > MAX_QUERY_CHARS:
        half = MAX_QUERY_CHARS // 2
        q = f"{q[:half]} {q[-half:]}"
    return q


def storable(text: str) -> bool:
    """Whether every store takes ``text``.

    No NUL (PostgreSQL refuses it in text) and no lone surrogate (not UTF-8); JSON's escapes
    allow both, so a model can send them.
    """
    return "\x00" not in text and text == text.encode("utf-8", "replace").decode()


def text_key(text: str) -> str:
    """sha256 (hex) of ``text`` with its whitespace normalised (runs of it one space, ends cut).

    Two texts with the same key are the same fact to :meth:`MemoryStore.put`.
    """
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()


class Provenance(BaseModel):
    """Where an item came from: the run, its turn, the tool call or message, and who wrote it."""

    run_id: str | None = None
    turn: int | None = None
    tool_call_id: str | None = None
    message_index: int | None = None
    source: Literal["tool", "consolidation", "person", "import"] = "tool"


class MemoryItem(BaseModel):
    """One remembered fact, lesson or summary. Times are Unix seconds."""

    id: str = Field(default_factory=lambda: f"mem-{uuid.uuid4().hex[:16]}")
    namespace: Namespace
    text: str = Field(min_length=1, max_length=8000)
    kind: Literal["fact", "lesson", "summary"] = "fact"
    metadata: dict[str, Any] = Field(default_factory=dict)
    provenance: Provenance = Field(default_factory=Provenance)
    created: float = Field(default_factory=time.time)
    updated: float = Field(default_factory=time.time)
    valid_to: float | None = None
    superseded_by: str | None = None
    expires_at: float | None = None
    """TTL: the item is not returned after this time (None: kept until deleted)."""
    idempotency_key: str | None = None
    """Writes with the same key (e.g. ``<run>/<turn>/<n>``) store one item."""


class Hit(BaseModel):
    """A search result: the item and its fused score (reciprocal rank fusion, higher first)."""

    item: MemoryItem
    score: float


class MemoryStore(Protocol):
    """What every memory backend offers (SQLite: :mod:`activities.memory.sqlite_store`).

    Every method takes namespaces explicitly and matches them exactly.
    """

    def put(self, item: MemoryItem) -> MemoryItem:
        """Store ``item`` and return it, or return the item already stored instead.

        A second put with the same ``idempotency_key`` (same tenant) returns the first item; a put
        whose text equals (whitespace normalised, :func:`text_key`) that of a live item of the
        same namespace (not superseded, not expired) returns that item and stores nothing.
        """
        ...

    def get(self, tenant_id: str, item_id: str) -> MemoryItem | None:
        """The item of that tenant with that id (superseded ones included), or None."""
        ...

    def search(self, namespaces: list[Namespace], query: str, limit: int = 5) -> list[Hit]:
        """Live items of those namespaces matching ``query``, best first (hybrid retrieval)."""
        ...

    def supersede(self, old_id: str, new: MemoryItem) -> MemoryItem:
        """Store ``new`` and close ``old_id`` (``valid_to`` now, ``superseded_by`` new's id).

        Raises:
            KeyError: no live item ``old_id`` in ``new``'s namespace.
        """
        ...

    def delete(self, tenant_id: str, item_id: str) -> bool:
        """Delete for real (people only); True when an item was deleted."""
        ...

    def list(
        self, namespace: Namespace, include_superseded: bool = False, limit: int = 100
    ) -> list[MemoryItem]:
        """Items of one namespace, newest first."""
        ...

    def edit(self, tenant_id: str, item_id: str, text: str) -> MemoryItem:
        """Change an item's text (people only).

        Raises:
            KeyError: no such item.
        """
        ...
