"""``AGENT_MEMORY_URL`` -> a :class:`~activities.memory.items.MemoryStore` (one per URL, cached)."""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

from activities.extras import MissingExtraError, install_hint, installed
from activities.memory.embed import WordLlamaEmbedder
from activities.memory.items import MemoryStore

_stores: dict[str, MemoryStore] = {}
_lock = threading.Lock()
_default: list[str] = []


def configure(url: str) -> None:
    """Set the store the memory tools and consolidation use (the worker calls it at start).

    Raises:
        activities.extras.MissingExtraError: a PostgreSQL URL on a worker without the extra
            ``postgres`` (so the worker says so as it starts, not on a run's first memory use).
    """
    if urlsplit(url).scheme in ("postgresql", "postgres") and not installed("psycopg"):
        raise MissingExtraError(
            f"AGENT_MEMORY_URL is a PostgreSQL URL, and psycopg is not installed: "
            f"{install_hint('postgres')}"
        )
    _default[:] = [url]


def default_store() -> MemoryStore:
    """The store set by :func:`configure`.

    Raises:
        RuntimeError: not configured (a worker always configures it).
    """
    if not _default:
        raise RuntimeError("the memory store is not configured on this worker")
    return open_store(_default[0])


class MemoryUrlError(ValueError):
    """``AGENT_MEMORY_URL`` names no backend this runtime has."""


def open_store(url: str) -> MemoryStore:
    """The store at ``url``: SQLite or PostgreSQL.

    ``sqlite:///ABSOLUTE/PATH.db``, ``sqlite://:memory:`` or ``postgresql://USER@HOST:PORT/DB``
    (PostgreSQL with pgvector, :mod:`.pg_store`).

    Raises:
        MemoryUrlError: another scheme.
        psycopg.OperationalError: the PostgreSQL server cannot be reached.
    """
    with _lock:
        if url in _stores:
            return _stores[url]
        parts = urlsplit(url)
        if parts.scheme in ("postgresql", "postgres"):
            from activities.memory.pg_store import PostgresMemoryStore

            store = _stores[url] = PostgresMemoryStore(url, WordLlamaEmbedder())
            return store
        if parts.scheme != "sqlite":
            raise MemoryUrlError(
                f"AGENT_MEMORY_URL {url!r}: give sqlite:///PATH or postgresql://USER@HOST/DB"
            )
        from activities.memory.sqlite_store import SqliteMemoryStore

        path = ":memory:" if parts.netloc == ":memory:" else parts.path
        store = _stores[url] = SqliteMemoryStore(path, WordLlamaEmbedder())
        return store
