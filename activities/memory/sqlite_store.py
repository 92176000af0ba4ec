r"""The embedded memory store: one SQLite file, FTS5 (BM25) plus embeddings, fused by rank.

Opened through ``apsw`` (it bundles SQLite and can load extensions; this machine's Python
``sqlite3`` has no ``enable_load_extension``); sqlite-vec is loaded only so that a file of the
first schema (a ``vec0`` table) can be read and migrated. The tables, clustered by namespace, are described
in :mod:`activities.memory.sqlite_schema` (which also migrates files of the first schema).

Search runs, per namespace, a BM25 query and a KNN query, each for ``limit * 4`` candidates, and
fuses them by reciprocal rank fusion (score ``sum 1 / (60 + rank)``; Cormack et al., SIGIR 2009):

* Words: FTS5 restricted to the namespace's rowid range. A term found in at least
  ``max(COMMON_MIN_DOCS, COMMON_FRACTION * live items)`` items of the namespace is *common*
  (counted with a ``LIMIT``, so at most that many postings are read). As in Lucene's
  common-terms query, the other terms are ranked by ``bm25()`` (OR) without the common ones;
  when they give fewer than the candidates wanted (or the query has only common terms), the
  items that hold every common term (AND) follow, newest first. Ranking by ``bm25()`` costs FTS5 about 0.7 microseconds an item that
  matches (18 ms for 23,000 items) plus, for each term's IDF, a pass over that term's postings
  in the whole file (5 ms for four words each in 46,000 of 100,000 items), measured here
  (2026-11); a namespace under ``COMMON_MIN_DOCS`` items ranks every term by ``bm25()``.
* Vectors: Hamming distance over the embeddings' sign bits (the namespace's ``codes`` blocks,
  numpy) for ``KNN_OVERSAMPLE`` times the candidates, re-ranked by the cosine of the float
  embeddings (``items.emb``); a namespace of up to ``limit * 4 * KNN_OVERSAMPLE`` live items is
  re-ranked whole, so its ranking is exact. On the synthetic 100k set this keeps 99% of the exact
  cosine top 32 (measured here, 2026-11).
* A store keeps, for its ``CODES_CACHED`` most recent namespaces, their codes and which terms
  are common, while the namespace's ``ver`` (bumped in the file by every index change, from any
  process) is the one they were read at.

Namespaces match by equality of both segments (the ``namespaces`` table), never by pattern, and
every hit is checked against the asked namespaces before it is returned; query text reaches FTS5
only as quoted ``\w+`` terms, so ``%``, ``_``, ``"``, ``*`` or ``NEAR`` in it are just characters.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import OrderedDict
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import apsw
import numpy as np
import sqlite_vec  # pyright: ignore[reportMissingTypeStubs] - sqlite-vec ships no type stubs

from activities.memory import sqlite_schema as sch
from activities.memory.embed import Embedder
from activities.memory.fusion import fuse
from activities.memory.items import Hit, MemoryItem, Namespace, query_text, text_key
from activities.private_files import private_file

_WORD = re.compile(r"\w+", re.UNICODE)
COMMON_MIN_DOCS = 1000
"""A term in fewer items of a namespace than this is never common (see the module doc)."""
COMMON_FRACTION = 0.05
"""A term in at least this fraction of a namespace's live items (and COMMON_MIN_DOCS) is common."""
KNN_OVERSAMPLE = 8
"""Hamming candidates per wanted vector candidate, re-ranked by cosine."""
CODES_CACHED = 64
"""Namespaces whose codes a store keeps in memory (40 bytes an item for 256 dimensions)."""
_LIVE = "valid_to IS NULL AND (expires_at IS NULL OR expires_at > ?)"


def fts_terms(text: str, max_terms: int = 32) -> list[str]:
    r"""The distinct lower-cased ``\w+`` words of ``text``, at most ``max_terms``, in order."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))[:max_terms]


def fts_query(text: str, max_terms: int = 32) -> str | None:
    """``text`` as an FTS5 OR-query of quoted terms (None when it has no word)."""
    return " OR ".join(f'"{w}"' for w in fts_terms(text, max_terms)) or None


class SqliteMemoryStore:
    """:class:`~activities.memory.items.MemoryStore` on one SQLite file (``":memory:"`` works).

    Thread-safe (one connection behind a lock); ``embedder`` turns text into vectors. A file of
    the first schema is migrated when opened (:func:`activities.memory.sqlite_schema.open_schema`).
    """

    def __init__(self, path: str | Path, embedder: Embedder) -> None:
        self._emb = embedder
        if str(path) != ":memory:":
            private_file(path, sqlite=True)  # what people told their runs: owner only
        self._db = apsw.Connection(str(path))
        self._db.enable_load_extension(True)
        self._db.load_extension(sqlite_vec.loadable_path())
        self._db.enable_load_extension(False)
        self._db.setbusytimeout(5000)
        self._lock = threading.RLock()
        self._codes: OrderedDict[int, tuple[int, np.ndarray, np.ndarray]] = OrderedDict()
        self._flags: OrderedDict[tuple[int, int], dict[str, bool]] = OrderedDict()
        with self._lock:
            _wal(self._db)
            sch.open_schema(self._db)
            with self._tx():
                self._merge_duplicates()

    def _merge_duplicates(self) -> None:
        """Close live items whose text key another live item of their namespace already has.

        Written before :meth:`put` stored a fact once (2026-11-26): the oldest stays, each later
        copy is closed (``valid_to``) and points at it (``superseded_by``), as :meth:`supersede`
        does, and leaves the indexes. One indexed query when there is nothing to merge.
        """
        groups = sch.fetchall(
            self._db,
            "SELECT tenant, scope, norm FROM items WHERE valid_to IS NULL AND norm IS NOT NULL "
            "GROUP BY tenant, scope, norm HAVING count(*) > 1",
        )
        now = time.time()
        for tenant, scope, norm in groups:
            rows = sch.fetchall(
                self._db,
                "SELECT rid, body FROM items WHERE tenant = ? AND scope = ? AND norm = ? "
                "AND valid_to IS NULL ORDER BY created, rid",
                (tenant, scope, norm),
            )
            kept = MemoryItem.model_validate_json(str(rows[0][1]))
            for rid, body in rows[1:]:
                copy = MemoryItem.model_validate_json(str(body))
                copy.valid_to, copy.superseded_by, copy.updated = now, kept.id, now
                sch.execute(
                    self._db,
                    "UPDATE items SET body = ?, valid_to = ? WHERE rid = ?",
                    (copy.model_dump_json(), now, rid),
                )
                sch.unindex(self._db, int(rid))

    def _tx(self) -> AbstractContextManager[None]:
        """A write transaction taken at once (:func:`activities.memory.sqlite_schema.write_tx`)."""
        return sch.write_tx(self._db)

    # ---------------------------------------------------------------- writing

    def put(self, item: MemoryItem) -> MemoryItem:
        """Store ``item`` (see the protocol); returns the stored item or the one already there."""
        vec = self._emb.embed([item.text])[0]
        ns = item.namespace
        with self._lock, self._tx():
            if item.idempotency_key:
                prior = self._one(
                    "SELECT body FROM items WHERE tenant = ? AND idem = ?",
                    (ns.tenant_id, item.idempotency_key),
                )
                if prior is not None:
                    return prior
            same = self._one(
                f"SELECT body FROM items WHERE tenant = ? AND scope = ? AND norm = ? AND {_LIVE} "
                "LIMIT 1",
                (ns.tenant_id, ns.scope, text_key(item.text), time.time()),
            )
            if same is not None:
                return same
            return self._insert(item, vec)

    def _insert(self, item: MemoryItem, vec: np.ndarray) -> MemoryItem:
        ns = item.namespace
        nid = sch.namespace_id(self._db, ns.tenant_id, ns.scope)
        assert nid is not None  # made when missing
        rid = sch.next_rid(self._db, nid)
        emb = vec.astype(np.float32)
        sch.execute(
            self._db,
            "INSERT INTO items(rid, id, tenant, scope, body, idem, valid_to, expires_at, created, "
            "norm, emb) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                rid, item.id, ns.tenant_id, ns.scope, item.model_dump_json(), item.idempotency_key,
                item.valid_to, item.expires_at, item.created, text_key(item.text), emb.tobytes(),
            ),
        )  # fmt: skip
        if item.valid_to is None:
            sch.index(self._db, rid, item.text, emb)
        return item

    def supersede(self, old_id: str, new: MemoryItem) -> MemoryItem:
        """Store ``new``; close ``old_id`` (same namespace, still live) pointing at it."""
        vec = self._emb.embed([new.text])[0]
        ns = new.namespace
        with self._lock, self._tx():
            row = self._row(
                "SELECT rid, body FROM items WHERE id = ? AND tenant = ? AND scope = ? "
                "AND valid_to IS NULL",
                (old_id, ns.tenant_id, ns.scope),
            )
            if row is None:
                raise KeyError(f"no live memory item {old_id} in this namespace")
            old = MemoryItem.model_validate_json(row[1])
            old.valid_to, old.superseded_by, old.updated = time.time(), new.id, time.time()
            sch.execute(
                self._db,
                "UPDATE items SET body = ?, valid_to = ? WHERE rid = ?",
                (old.model_dump_json(), old.valid_to, row[0]),
            )
            sch.unindex(self._db, row[0])
            return self._insert(new, vec)

    def delete(self, tenant_id: str, item_id: str) -> bool:
        """Delete the item for real; True when it existed."""
        with self._lock, self._tx():
            row = self._row(
                "SELECT rid, valid_to FROM items WHERE id = ? AND tenant = ?", (item_id, tenant_id)
            )
            if row is None:
                return False
            if row[1] is None:
                sch.unindex(self._db, row[0])
            sch.execute(self._db, "DELETE FROM items WHERE rid = ?", (row[0],))
            return True

    def edit(self, tenant_id: str, item_id: str, text: str) -> MemoryItem:
        """Change the text of a live item (re-indexed)."""
        vec = self._emb.embed([text])[0].astype(np.float32)
        with self._lock, self._tx():
            row = self._row(
                "SELECT rid, body FROM items WHERE id = ? AND tenant = ? AND valid_to IS NULL",
                (item_id, tenant_id),
            )
            if row is None:
                raise KeyError(f"no live memory item {item_id}")
            item = MemoryItem.model_validate_json(row[1])
            item.text, item.updated = text, time.time()
            sch.execute(
                self._db,
                "UPDATE items SET body = ?, norm = ?, emb = ? WHERE rid = ?",
                (item.model_dump_json(), text_key(text), vec.tobytes(), row[0]),
            )
            sch.unindex(self._db, row[0])
            sch.index(self._db, row[0], text, vec)
            return item

    # ---------------------------------------------------------------- reading

    def _row(self, sql: str, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        for r in sch.execute(self._db, sql, args):
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
            rows = sch.fetchall(
                self._db,
                f"SELECT body FROM items WHERE tenant = ? AND scope = ?{live} "
                "ORDER BY created DESC LIMIT ?",
                (namespace.tenant_id, namespace.scope, limit),
            )
        return [MemoryItem.model_validate_json(r[0]) for r in rows]

    def search(self, namespaces: list[Namespace], query: str, limit: int = 5) -> list[Hit]:
        """Hybrid search (BM25 + cosine KNN, fused by RRF) over live, unexpired items.

        ``limit`` items at most, best (highest fused score) first; ``[]`` for an empty query.
        """
        query = query_text(query)
        if not namespaces or not query.strip():
            return []
        vec = self._emb.embed([query])[0].astype(np.float32)
        want = max(1, limit) * 4
        terms = fts_terms(query)
        scores: dict[int, float] = {}
        asked: dict[int, tuple[str, str]] = {}
        with self._lock:
            for ns in dict.fromkeys(namespaces):
                row = self._row(
                    "SELECT nid, live, ver FROM namespaces WHERE tenant = ? AND scope = ?",
                    (ns.tenant_id, ns.scope),
                )
                if row is None:
                    continue
                asked[row[0]] = (ns.tenant_id, ns.scope)
                fuse(
                    [
                        self._bm25((row[0], row[2]), row[1], terms, want),
                        self._knn(row[0], row[2], vec, want),
                    ],
                    scores,
                )
            return self._hits(scores, asked, limit)

    def _hits(
        self, scores: dict[int, float], asked: dict[int, tuple[str, str]], limit: int
    ) -> list[Hit]:
        """The best live, unexpired items of ``scores`` whose namespace is one of ``asked``."""
        best = [rid for rid, _ in sorted(scores.items(), key=lambda kv: -kv[1])]
        hits: list[Hit] = []
        now = time.time()
        for at in range(0, len(best), 2 * limit):
            part = best[at : at + 2 * limit]
            rows = {
                r[0]: r[1:]
                for r in sch.execute(
                    self._db,
                    f"SELECT rid, tenant, scope, body FROM items WHERE rid IN "
                    f"({','.join('?' * len(part))}) AND {_LIVE}",
                    (*part, now),
                )
            }
            for rid in part:
                got = rows.get(rid)
                if got is not None and (got[0], got[1]) == asked.get(rid >> sch.NS_BITS):
                    hits.append(Hit(item=MemoryItem.model_validate_json(got[2]), score=scores[rid]))
                    if len(hits) >= limit:
                        return hits
        return hits

    def _bm25(self, nv: tuple[int, int], live: int, terms: list[str], want: int) -> list[int]:
        """Rids of namespace ``nv = (nid, ver)`` by words, best first (common terms: module doc)."""
        if not terms:
            return []
        lo, hi = sch.rid_range(nv[0])
        cut = max(COMMON_MIN_DOCS, int(live * COMMON_FRACTION))
        common: set[str] = set()
        if live >= cut:
            flags = self._flags.setdefault(nv, {})  # valid while the namespace's ver is nv[1]
            self._flags.move_to_end(nv)
            while len(self._flags) > CODES_CACHED:
                self._flags.popitem(last=False)
            if len(flags) > 10_000:  # a bound on the terms kept per namespace
                flags.clear()
            new = [t for t in terms if t not in flags]
            if new:
                flags.update(zip(new, self._common(new, lo, hi, cut), strict=True))
            common = {t for t in terms if flags[t]}
        rare = [t for t in terms if t not in common]
        out = self._match(" OR ".join(f'"{t}"' for t in rare), "rank", lo, hi, want) if rare else []
        if common and len(out) < want:  # then the items holding every common term, newest first
            seen = set(out)
            every = " AND ".join(f'"{t}"' for t in terms if t in common)
            out += [r for r in self._match(every, "rowid DESC", lo, hi, want) if r not in seen]
        return out[:want]

    def _match(self, match: str, order: str, lo: int, hi: int, want: int) -> list[int]:
        """Rids ``lo..hi`` matching the FTS5 query ``match``, by ``order``, at most ``want``."""
        rows = sch.fetchall(
            self._db,
            "SELECT rowid FROM items_fts WHERE items_fts MATCH ? AND rowid BETWEEN ? AND ? "
            f"ORDER BY {order} LIMIT ?",
            (match, lo, hi, want),
        )
        return [int(str(r[0])) for r in rows]

    def _common(self, terms: list[str], lo: int, hi: int, cut: int) -> list[bool]:
        """For each term: is it in at least ``cut`` items of rids ``lo..hi`` (one statement)."""
        one = (
            "(SELECT count(*) FROM (SELECT 1 FROM items_fts WHERE items_fts MATCH ? "
            "AND rowid BETWEEN ? AND ? LIMIT ?))"
        )
        args = [a for t in terms for a in (f'"{t}"', lo, hi, cut)]
        row = sch.fetchall(self._db, "SELECT " + ", ".join([one] * len(terms)), args)[0]
        return [int(str(n)) >= cut for n in row]

    def _namespace_codes(self, nid: int, ver: int) -> tuple[np.ndarray, np.ndarray]:
        """:func:`sqlite_schema.codes` of ``nid``, kept while the namespace's ``ver`` is ``ver``.

        ``ver`` changes with every index change, by any process (it is in the file), so a kept
        copy is never older than the ``ver`` it was read at; at most ``CODES_CACHED`` are kept.
        """
        got = self._codes.get(nid)
        if got is not None and got[0] == ver:
            self._codes.move_to_end(nid)
            return got[1], got[2]
        rids, codes = sch.codes(self._db, nid)
        self._codes[nid] = (ver, rids, codes)
        self._codes.move_to_end(nid)
        while len(self._codes) > CODES_CACHED:
            self._codes.popitem(last=False)
        return rids, codes

    def _knn(self, nid: int, ver: int, vec: np.ndarray, want: int) -> list[int]:
        """Rids of namespace ``nid`` nearest ``vec``: Hamming candidates re-ranked by cosine."""
        rids, codes = self._namespace_codes(nid, ver)
        if not len(rids):
            return []
        query = np.frombuffer(sch.bits(vec), dtype=np.uint8)
        if codes.shape[1] != len(query):
            return []  # written by an embedder of another dimension
        if len(query) % 8 == 0:  # eight bytes at a time
            codes, query = codes.view(np.uint64), query.view(np.uint64)
        dist = np.bitwise_count(codes ^ query).sum(axis=1, dtype=np.int32)
        k = want * KNN_OVERSAMPLE
        near = rids if len(rids) <= k else rids[np.argpartition(dist, k)[:k]]
        cand = [int(r) for r in near]
        rows = [
            (rid, emb)
            for rid, emb in sch.execute(
                self._db,
                f"SELECT rid, emb FROM items WHERE rid IN ({','.join('?' * len(cand))})",
                cand,
            )
            if isinstance(emb, bytes) and len(emb) == vec.nbytes
        ]
        if not rows:
            return []
        mat = np.frombuffer(b"".join(e for _, e in rows), dtype=np.float32).reshape(len(rows), -1)
        order = np.argsort(-(mat @ vec), kind="stable")[:want]
        return [int(str(rows[int(i)][0])) for i in order]

    def namespaces(self, tenant_id: str) -> list[Namespace]:
        """The namespaces of one tenant that hold items."""
        with self._lock:
            rows = sch.fetchall(
                self._db,
                "SELECT DISTINCT scope FROM items WHERE tenant = ? ORDER BY scope",
                (tenant_id,),
            )
        return [Namespace(tenant_id=tenant_id, scope=r[0]) for r in rows]

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


def dumps(items: list[MemoryItem]) -> str:
    """Items as a JSON array (for the CLI)."""
    return json.dumps([i.model_dump(mode="json") for i in items], indent=2)


def _wal(db: apsw.Connection, seconds: float = 10.0) -> None:
    """Put the file in WAL mode (once per file; a no-op when it is already).

    Switching takes the file exclusively, and SQLite answers ``SQLITE_BUSY`` at once, without
    its busy handler, while another process is doing the same (measured: four processes opening
    a new file together, ``tests/memory/test_sqlite_processes.py``); so it is tried again, 50 ms
    apart, for up to ``seconds``.

    Raises:
        apsw.BusyError: still busy after ``seconds``.
    """
    deadline = time.monotonic() + seconds
    while True:
        try:
            sch.execute(db, "PRAGMA journal_mode=WAL")
            return
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)
