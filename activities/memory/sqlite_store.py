"""The embedded memory store: one SQLite file, FTS5 (BM25) plus sqlite-vec, fused by rank.

Opened through ``apsw`` (it bundles SQLite and can load extensions; this machine's Python
``sqlite3`` has no ``enable_load_extension``). Tables:

* ``items``: every item, live or superseded, keyed by ``rid`` (integer) and ``id`` (text);
* ``items_fts``: FTS5 over live items' text (its rowid is ``rid``), scored with ``bm25()``;
* ``items_vec``: sqlite-vec ``vec0`` over live items' embeddings, with ``tenant`` as a partition
  key and ``scope`` as a metadata column, so a KNN query only ever visits one tenant's rows.

Search runs BM25 and KNN per namespace, each for ``limit * 4`` candidates, and fuses them by
reciprocal rank fusion (score ``sum 1 / (60 + rank)``; Cormack et al., SIGIR 2009). Namespaces
match by equality of both segments, never by pattern; query text reaches FTS5 only as quoted
terms, so ``%``, ``_``, ``"``, ``*`` or ``NEAR`` in it are just characters.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import sqlite_vec

from activities.memory.embed import Embedder
from activities.memory.fusion import fuse
from activities.memory.items import Hit, MemoryItem, Namespace

SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
  rid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL, scope TEXT NOT NULL,
  body TEXT NOT NULL, idem TEXT, valid_to REAL, expires_at REAL, created REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS items_idem ON items(tenant, idem) WHERE idem IS NOT NULL;
CREATE INDEX IF NOT EXISTS items_ns ON items(tenant, scope, created);
CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(text, tokenize='porter unicode61');
"""
_WORD = re.compile(r"\w+", re.UNICODE)


def fts_query(text: str, max_terms: int = 32) -> str | None:
    """``text`` as an FTS5 OR-query of quoted terms (None when it has no word)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))[:max_terms]
    return " OR ".join(f'"{w}"' for w in words) or None


class SqliteMemoryStore:
    """:class:`~activities.memory.items.MemoryStore` on one SQLite file (``":memory:"`` works).

    Thread-safe (one connection behind a lock); ``embedder`` turns text into vectors.
    """

    def __init__(self, path: str | Path, embedder: Embedder) -> None:
        self._emb = embedder
        if str(path) != ":memory:":
            Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        self._db = apsw.Connection(str(path))
        self._db.enable_load_extension(True)
        self._db.load_extension(sqlite_vec.loadable_path())
        self._db.enable_load_extension(False)
        self._db.setbusytimeout(5000)
        self._lock = threading.RLock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(SCHEMA)
            self._db.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS items_vec USING vec0("
                f"tenant TEXT partition key, scope TEXT, embedding float[{embedder.dim}] "
                "distance_metric=cosine)"
            )

    # ---------------------------------------------------------------- writing

    def put(self, item: MemoryItem) -> MemoryItem:
        """Store ``item`` (see the protocol); returns the stored item."""
        vec = self._emb.embed([item.text])[0]
        with self._lock, self._db:
            if item.idempotency_key:
                prior = self._one(
                    "SELECT body FROM items WHERE tenant = ? AND idem = ?",
                    (item.namespace.tenant_id, item.idempotency_key),
                )
                if prior is not None:
                    return prior
            return self._insert(item, vec)

    def _insert(self, item: MemoryItem, vec: np.ndarray) -> MemoryItem:
        ns = item.namespace
        self._db.execute(
            "INSERT INTO items(id, tenant, scope, body, idem, valid_to, expires_at, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                item.id, ns.tenant_id, ns.scope, item.model_dump_json(), item.idempotency_key,
                item.valid_to, item.expires_at, item.created,
            ),
        )  # fmt: skip
        rid = self._db.last_insert_rowid()
        if item.valid_to is None:
            self._db.execute("INSERT INTO items_fts(rowid, text) VALUES (?, ?)", (rid, item.text))
            self._db.execute(
                "INSERT INTO items_vec(rowid, tenant, scope, embedding) VALUES (?, ?, ?, ?)",
                (rid, ns.tenant_id, ns.scope, vec.astype(np.float32).tobytes()),
            )
        return item

    def _unindex(self, rid: int) -> None:
        self._db.execute("DELETE FROM items_fts WHERE rowid = ?", (rid,))
        self._db.execute("DELETE FROM items_vec WHERE rowid = ?", (rid,))

    def supersede(self, old_id: str, new: MemoryItem) -> MemoryItem:
        """Store ``new``; close ``old_id`` (same namespace, still live) pointing at it."""
        vec = self._emb.embed([new.text])[0]
        ns = new.namespace
        with self._lock, self._db:
            row = self._row(
                "SELECT rid, body FROM items WHERE id = ? AND tenant = ? AND scope = ? "
                "AND valid_to IS NULL",
                (old_id, ns.tenant_id, ns.scope),
            )
            if row is None:
                raise KeyError(f"no live memory item {old_id} in this namespace")
            old = MemoryItem.model_validate_json(row[1])
            old.valid_to, old.superseded_by, old.updated = time.time(), new.id, time.time()
            self._db.execute(
                "UPDATE items SET body = ?, valid_to = ? WHERE rid = ?",
                (old.model_dump_json(), old.valid_to, row[0]),
            )
            self._unindex(row[0])
            return self._insert(new, vec)

    def delete(self, tenant_id: str, item_id: str) -> bool:
        """Delete the item for real; True when it existed."""
        with self._lock, self._db:
            row = self._row(
                "SELECT rid FROM items WHERE id = ? AND tenant = ?", (item_id, tenant_id)
            )
            if row is None:
                return False
            self._unindex(row[0])
            self._db.execute("DELETE FROM items WHERE rid = ?", (row[0],))
            return True

    def edit(self, tenant_id: str, item_id: str, text: str) -> MemoryItem:
        """Change the text of a live item (re-indexed)."""
        vec = self._emb.embed([text])[0]
        with self._lock, self._db:
            row = self._row(
                "SELECT rid, body FROM items WHERE id = ? AND tenant = ? AND valid_to IS NULL",
                (item_id, tenant_id),
            )
            if row is None:
                raise KeyError(f"no live memory item {item_id}")
            item = MemoryItem.model_validate_json(row[1])
            item.text, item.updated = text, time.time()
            self._db.execute(
                "UPDATE items SET body = ? WHERE rid = ?", (item.model_dump_json(), row[0])
            )
            self._unindex(row[0])
            ns = item.namespace
            self._db.execute("INSERT INTO items_fts(rowid, text) VALUES (?, ?)", (row[0], text))
            self._db.execute(
                "INSERT INTO items_vec(rowid, tenant, scope, embedding) VALUES (?, ?, ?, ?)",
                (row[0], ns.tenant_id, ns.scope, vec.astype(np.float32).tobytes()),
            )
            return item

    # ---------------------------------------------------------------- reading

    def _row(self, sql: str, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        for r in self._db.execute(sql, args):
            return tuple(r)
        return None

    def _one(self, sql: str, args: tuple[Any, ...]) -> MemoryItem | None:
        row = self._row(sql, args)
        return MemoryItem.model_validate_json(row[0]) if row else None

    def get(self, tenant_id: str, item_id: str) -> MemoryItem | None:
        """The item (live or superseded) of that tenant, or None."""
        with self._lock:
            return self._one(
                "SELECT body FROM items WHERE id = ? AND tenant = ?", (item_id, tenant_id)
            )

    def list(
        self, namespace: Namespace, include_superseded: bool = False, limit: int = 100
    ) -> list[MemoryItem]:
        """Items of one namespace, newest first."""
        live = "" if include_superseded else " AND valid_to IS NULL"
        with self._lock:
            rows = self._db.execute(
                f"SELECT body FROM items WHERE tenant = ? AND scope = ?{live} "
                "ORDER BY created DESC LIMIT ?",
                (namespace.tenant_id, namespace.scope, limit),
            ).fetchall()
        return [MemoryItem.model_validate_json(r[0]) for r in rows]

    def search(self, namespaces: list[Namespace], query: str, limit: int = 5) -> list[Hit]:
        """Hybrid search (BM25 + cosine KNN, fused by RRF) over live, unexpired items."""
        if not namespaces or not query.strip():
            return []
        vec = self._emb.embed([query])[0].astype(np.float32).tobytes()
        want = max(1, limit) * 4
        scores: dict[int, float] = {}
        match = fts_query(query)
        with self._lock:
            for ns in dict.fromkeys(namespaces):
                fuse([self._bm25(ns, match, want), self._knn(ns, vec, want)], scores)
            best = sorted(scores.items(), key=lambda kv: -kv[1])
            now = time.time()
            hits: list[Hit] = []
            for rid, score in best:
                row = self._row(
                    "SELECT body FROM items WHERE rid = ? AND valid_to IS NULL "
                    "AND (expires_at IS NULL OR expires_at > ?)",
                    (rid, now),
                )
                if row is not None:
                    hits.append(Hit(item=MemoryItem.model_validate_json(row[0]), score=score))
                if len(hits) >= limit:
                    break
        return hits

    def _bm25(self, ns: Namespace, match: str | None, want: int) -> list[int]:
        if match is None:
            return []
        rows = self._db.execute(
            "SELECT f.rowid FROM items_fts f JOIN items i ON i.rid = f.rowid "
            "WHERE items_fts MATCH ? AND i.tenant = ? AND i.scope = ? "
            "ORDER BY bm25(items_fts) LIMIT ?",
            (match, ns.tenant_id, ns.scope, want),
        ).fetchall()
        return [r[0] for r in rows]

    def _knn(self, ns: Namespace, vec: bytes, want: int) -> list[int]:
        rows = self._db.execute(
            "SELECT rowid FROM items_vec WHERE embedding MATCH ? AND k = ? AND tenant = ? "
            "AND scope = ? ORDER BY distance",
            (vec, want, ns.tenant_id, ns.scope),
        ).fetchall()
        return [r[0] for r in rows]

    def namespaces(self, tenant_id: str) -> list[Namespace]:
        """The namespaces of one tenant that hold items."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT scope FROM items WHERE tenant = ? ORDER BY scope", (tenant_id,)
            ).fetchall()
        return [Namespace(tenant_id=tenant_id, scope=r[0]) for r in rows]

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


def dumps(items: list[MemoryItem]) -> str:
    """Items as a JSON array (for the CLI)."""
    return json.dumps([i.model_dump(mode="json") for i in items], indent=2)
