"""The memory store on PostgreSQL: full-text search plus pgvector, fused by rank.

The same :class:`~activities.memory.items.MemoryStore` as :mod:`activities.memory.sqlite_store`,
for many workers on many machines (``AGENT_MEMORY_URL=postgresql://...``). One table::

    memory_items(rid bigserial, id text unique, tenant, scope, body jsonb, idem, valid_to,
                 expires_at, created, tsv tsvector (generated from the text), embedding vector(D))

Search runs, per namespace, a full-text query (``ts_rank_cd`` over the ``simple`` configuration,
the query's words OR-ed, each word a quoted lexeme) and a cosine KNN (``embedding <=> query``),
each for ``limit * 4`` candidates, and fuses them by reciprocal rank fusion exactly as the SQLite
store does (score ``sum 1 / (60 + rank)``). Namespaces match by equality of both columns, never by
pattern; every value is a bound parameter, so ``%``, ``_``, quotes or ``&|!`` in ids and queries
are only characters. Sources: pgvector's README (``vector`` type, ``<=>`` cosine distance,
``hnsw`` index); PostgreSQL's full-text search chapter (``to_tsvector``, ``ts_rank_cd``).
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any, LiteralString, cast

import numpy as np

from activities.extras import missing_extra
from activities.memory.embed import Embedder
from activities.memory.fusion import fuse
from activities.memory.items import Hit, MemoryItem, Namespace, query_text, text_key

_WORD = re.compile(r"\w+", re.UNICODE)


def _schema(dim: int) -> str:
    return f"""
CREATE EXTENSION IF NOT EXISTS vector;
CREATE TABLE IF NOT EXISTS memory_items (
  rid BIGSERIAL PRIMARY KEY, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL, scope TEXT NOT NULL,
  body JSONB NOT NULL, idem TEXT, valid_to DOUBLE PRECISION, expires_at DOUBLE PRECISION,
  created DOUBLE PRECISION NOT NULL, text TEXT NOT NULL,
  tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
  embedding vector({dim}) NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS memory_items_idem ON memory_items(tenant, idem)
  WHERE idem IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_items_ns ON memory_items(tenant, scope, created);
CREATE INDEX IF NOT EXISTS memory_items_tsv ON memory_items USING gin(tsv);
CREATE INDEX IF NOT EXISTS memory_items_vec ON memory_items
  USING hnsw (embedding vector_cosine_ops);
ALTER TABLE memory_items ADD COLUMN IF NOT EXISTS norm TEXT;
CREATE INDEX IF NOT EXISTS memory_items_norm ON memory_items(tenant, scope, norm)
  WHERE valid_to IS NULL;
"""


def ts_query(text: str, max_terms: int = 32) -> str | None:
    """``text`` as a ``to_tsquery('simple', ...)`` OR-query of quoted words (None: no word)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))[:max_terms]
    return " | ".join("'" + w.replace("'", "") + "'" for w in words) or None


def _vec(v: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in v.astype(np.float32)) + "]"


class PostgresMemoryStore:
    """:class:`~activities.memory.items.MemoryStore` on PostgreSQL with pgvector.

    ``url`` is a libpq URL (``postgresql://user@host:port/db``); the ``vector`` extension must be
    available on the server (it is created if missing). One connection behind a lock; each
    method is one transaction.

    Raises:
        psycopg.OperationalError: the server cannot be reached (at construction).
        activities.extras.MissingExtraError: psycopg is not installed (extra ``postgres``).
    """

    def __init__(self, url: str, embedder: Embedder) -> None:
        try:
            import psycopg
        except ModuleNotFoundError as e:  # the optional extra `postgres`
            raise missing_extra("postgres", "the memory store on PostgreSQL", e) from e

        self._emb = embedder
        self._lock = threading.RLock()
        self._db = psycopg.connect(url, autocommit=True)
        with self._lock, self._db.transaction():
            self._db.execute(cast(LiteralString, _schema(embedder.dim)))  # dim: an int
            self._backfill_norm()
            self._merge_duplicates()

    def _backfill_norm(self) -> None:
        """Fill ``norm`` (:func:`text_key`) of rows written before the column existed."""
        rows = self._db.execute("SELECT rid, text FROM memory_items WHERE norm IS NULL").fetchall()
        for rid, text in rows:
            self._db.execute(
                "UPDATE memory_items SET norm = %s WHERE rid = %s", (text_key(text), rid)
            )

    def _merge_duplicates(self) -> None:
        """Close live items whose text key another live item of their namespace already has.

        Written before :meth:`put` stored a fact once (2026-11-26): the oldest stays, each later
        copy is closed (``valid_to``) and points at it (``superseded_by``), as :meth:`supersede`
        does. One indexed query when there is nothing to merge.
        """
        groups = self._db.execute(
            "SELECT tenant, scope, norm FROM memory_items WHERE valid_to IS NULL "
            "AND norm IS NOT NULL GROUP BY tenant, scope, norm HAVING count(*) > 1"
        ).fetchall()
        now = time.time()
        for tenant, scope, norm in groups:
            rows = self._db.execute(
                "SELECT rid, body FROM memory_items WHERE tenant = %s AND scope = %s "
                "AND norm = %s AND valid_to IS NULL ORDER BY created, rid FOR UPDATE",
                (tenant, scope, norm),
            ).fetchall()
            kept = _item(rows[0][1])
            for rid, body in rows[1:]:
                copy = _item(body)
                copy.valid_to, copy.superseded_by, copy.updated = now, kept.id, now
                self._db.execute(
                    "UPDATE memory_items SET body = %s, valid_to = %s WHERE rid = %s",
                    (copy.model_dump_json(), now, rid),
                )

    # ---------------------------------------------------------------- writing

    def put(self, item: MemoryItem) -> MemoryItem:
        """Store ``item`` (see the protocol); returns the stored item or the one already there.

        Two puts of the same text into one namespace at once are serialised by a transaction
        advisory lock on (tenant, scope, text key), so they store one item.
        """
        vec = self._emb.embed([item.text])[0]
        ns, key = item.namespace, text_key(item.text)
        with self._lock, self._db.transaction():
            if item.idempotency_key:
                prior = self._one(
                    "SELECT body FROM memory_items WHERE tenant = %s AND idem = %s",
                    (ns.tenant_id, item.idempotency_key),
                )
                if prior is not None:
                    return prior
            self._db.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (repr((ns.tenant_id, ns.scope, key)),),
            )
            same = self._one(
                "SELECT body FROM memory_items WHERE tenant = %s AND scope = %s AND norm = %s "
                f"AND {self._LIVE} LIMIT 1",
                (ns.tenant_id, ns.scope, key, time.time()),
            )
            if same is not None:
                return same
            self._insert(item, vec)
            return item

    def _insert(self, item: MemoryItem, vec: np.ndarray) -> None:
        ns = item.namespace
        self._db.execute(
            "INSERT INTO memory_items(id, tenant, scope, body, idem, valid_to, expires_at, "
            "created, text, embedding, norm) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::vector, %s)",
            (
                item.id, ns.tenant_id, ns.scope, item.model_dump_json(), item.idempotency_key,
                item.valid_to, item.expires_at, item.created, item.text, _vec(vec),
                text_key(item.text),
            ),
        )  # fmt: skip

    def supersede(self, old_id: str, new: MemoryItem) -> MemoryItem:
        """Store ``new``; close ``old_id`` (same namespace, still live) pointing at it."""
        vec = self._emb.embed([new.text])[0]
        ns = new.namespace
        with self._lock, self._db.transaction():
            row = self._row(
                "SELECT rid, body FROM memory_items WHERE id = %s AND tenant = %s AND scope = %s "
                "AND valid_to IS NULL FOR UPDATE",
                (old_id, ns.tenant_id, ns.scope),
            )
            if row is None:
                raise KeyError(f"no live memory item {old_id} in this namespace")
            old = _item(row[1])
            old.valid_to, old.superseded_by, old.updated = time.time(), new.id, time.time()
            self._db.execute(
                "UPDATE memory_items SET body = %s, valid_to = %s WHERE rid = %s",
                (old.model_dump_json(), old.valid_to, row[0]),
            )
            self._insert(new, vec)
            return new

    def delete(self, tenant_id: str, item_id: str) -> bool:
        """Delete the item for real; True when it existed."""
        with self._lock, self._db.transaction():
            cur = self._db.execute(
                "DELETE FROM memory_items WHERE id = %s AND tenant = %s", (item_id, tenant_id)
            )
            return cur.rowcount > 0

    def edit(self, tenant_id: str, item_id: str, text: str) -> MemoryItem:
        """Change the text of a live item (re-indexed)."""
        vec = self._emb.embed([text])[0]
        with self._lock, self._db.transaction():
            row = self._row(
                "SELECT rid, body FROM memory_items WHERE id = %s AND tenant = %s "
                "AND valid_to IS NULL FOR UPDATE",
                (item_id, tenant_id),
            )
            if row is None:
                raise KeyError(f"no live memory item {item_id}")
            item = _item(row[1])
            item.text, item.updated = text, time.time()
            self._db.execute(
                "UPDATE memory_items SET body = %s, text = %s, embedding = %s::vector, norm = %s "
                "WHERE rid = %s",
                (item.model_dump_json(), text, _vec(vec), text_key(text), row[0]),
            )
            return item

    # ---------------------------------------------------------------- reading

    def _row(self, sql: LiteralString, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        row = self._db.execute(sql, args).fetchone()
        return tuple(row) if row is not None else None

    def _one(self, sql: LiteralString, args: tuple[Any, ...]) -> MemoryItem | None:
        row = self._row(sql, args)
        return _item(row[0]) if row else None

    def get(self, tenant_id: str, item_id: str) -> MemoryItem | None:
        """The item (live or superseded) of that tenant, or None."""
        with self._lock, self._db.transaction():
            return self._one(
                "SELECT body FROM memory_items WHERE id = %s AND tenant = %s",
                (item_id, tenant_id),
            )

    def list(
        self, namespace: Namespace, include_superseded: bool = False, limit: int = 100
    ) -> list[MemoryItem]:
        """Items of one namespace, newest first."""
        live = "" if include_superseded else " AND valid_to IS NULL"
        with self._lock, self._db.transaction():
            rows = self._db.execute(
                f"SELECT body FROM memory_items WHERE tenant = %s AND scope = %s{live} "
                "ORDER BY created DESC LIMIT %s",
                (namespace.tenant_id, namespace.scope, limit),
            ).fetchall()
        return [_item(r[0]) for r in rows]

    def search(self, namespaces: list[Namespace], query: str, limit: int = 5) -> list[Hit]:
        """Hybrid search (full text + cosine KNN, fused by RRF) over live, unexpired items."""
        query = query_text(query)
        if not namespaces or not query.strip():
            return []
        vec = _vec(self._emb.embed([query])[0])
        want = max(1, limit) * 4
        match = ts_query(query)
        scores: dict[int, float] = {}
        now = time.time()
        with self._lock, self._db.transaction():
            for ns in dict.fromkeys(namespaces):
                fuse([self._text(ns, match, want, now), self._knn(ns, vec, want, now)], scores)
            best = [rid for rid, _ in sorted(scores.items(), key=lambda kv: -kv[1])][:limit]
            bodies = dict(
                self._db.execute(
                    "SELECT rid, body FROM memory_items WHERE rid = ANY(%s)", (best,)
                ).fetchall()
            )
        return [Hit(item=_item(bodies[rid]), score=scores[rid]) for rid in best if rid in bodies]

    _LIVE = "valid_to IS NULL AND (expires_at IS NULL OR expires_at > %s)"

    def _text(self, ns: Namespace, match: str | None, want: int, now: float) -> list[int]:
        if match is None:
            return []
        rows = self._db.execute(
            "SELECT rid FROM memory_items, to_tsquery('simple', %s) q WHERE tsv @@ q "
            f"AND tenant = %s AND scope = %s AND {self._LIVE} "
            "ORDER BY ts_rank_cd(tsv, q) DESC LIMIT %s",
            (match, ns.tenant_id, ns.scope, now, want),
        ).fetchall()
        return [r[0] for r in rows]

    def _knn(self, ns: Namespace, vec: str, want: int, now: float) -> list[int]:
        rows = self._db.execute(
            f"SELECT rid FROM memory_items WHERE tenant = %s AND scope = %s AND {self._LIVE} "
            "ORDER BY embedding <=> %s::vector LIMIT %s",
            (ns.tenant_id, ns.scope, now, vec, want),
        ).fetchall()
        return [r[0] for r in rows]

    def namespaces(self, tenant_id: str) -> list[Namespace]:
        """The namespaces of one tenant that hold items."""
        with self._lock, self._db.transaction():
            rows = self._db.execute(
                "SELECT DISTINCT scope FROM memory_items WHERE tenant = %s ORDER BY scope",
                (tenant_id,),
            ).fetchall()
        return [Namespace(tenant_id=tenant_id, scope=r[0]) for r in rows]

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            self._db.close()


def _item(body: Any) -> MemoryItem:
    """A stored ``body`` (jsonb arrives as a dict, text as a string) as an item."""
    if isinstance(body, str):
        return MemoryItem.model_validate_json(body)
    return MemoryItem.model_validate(body)


class PostgresPending:
    """Runs waiting for consolidation, in the memory store's PostgreSQL (table ``memory_pending``).

    The same methods as :class:`activities.memory.consolidation.Pending` (a SQLite file in one
    worker's state folder), for workers on many hosts: ``memory.handoff`` runs on the worker of
    the run's workflow task, ``memory.consolidate`` on any worker of the queue, so the transcript
    one keeps must be what another reads. One row a run::

        memory_pending(run_id text primary key, tenant text, body text, created double precision)

    One connection behind a lock, opened again when it broke (the server restarted).

    Raises:
        psycopg.OperationalError: the server cannot be reached.
        activities.extras.MissingExtraError: psycopg is not installed (extra ``postgres``).
    """

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ModuleNotFoundError as e:  # the optional extra `postgres`
            raise missing_extra("postgres", "the memory store on PostgreSQL", e) from e
        self._url = url
        self._lock = threading.Lock()
        self._db = psycopg.connect(url, autocommit=True)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS memory_pending (run_id TEXT PRIMARY KEY, "
            "tenant TEXT NOT NULL, body TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)"
        )

    def _conn(self) -> Any:
        import psycopg

        if self._db.closed or self._db.broken:
            self._db = psycopg.connect(self._url, autocommit=True)
        return self._db

    def add(self, inp: Any) -> None:
        """Keep ``inp`` (a ``HandoffInput``; a second add of the same run changes nothing)."""
        with self._lock:
            self._conn().execute(
                "INSERT INTO memory_pending VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (inp.run_id, inp.tenant_id, inp.model_dump_json(), time.time()),
            )

    def get(self, tenant_id: str, run_id: str) -> str | None:
        """The pending run's JSON body (a ``HandoffInput``) of that tenant, or None (done)."""
        with self._lock:
            row = (
                self._conn()
                .execute(
                    "SELECT body FROM memory_pending WHERE run_id = %s AND tenant = %s",
                    (run_id, tenant_id),
                )
                .fetchone()
            )
        return str(row[0]) if row else None

    def done(self, run_id: str) -> None:
        """Forget a consolidated run."""
        with self._lock:
            self._conn().execute("DELETE FROM memory_pending WHERE run_id = %s", (run_id,))
