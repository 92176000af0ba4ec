"""The SQLite memory store's schema (version 2) and the migration from version 1.

Version 2 clusters every index by namespace. Each namespace ``(tenant, scope)`` gets an integer
``nid`` (table ``namespaces``, which also counts its live items and the changes to its
indexes, ``ver``), and an item's ``rid`` is
``nid << 32 | n`` (``n`` from 1 within the namespace). So:

* ``items_fts`` (FTS5, rowid ``rid``): one namespace's postings are one contiguous rowid range of
  every term's doclist, and ``rowid BETWEEN lo AND hi`` makes FTS5 read only that slice;
* ``codes``: the sign bits of each live item's embedding (``D / 8`` bytes, D rounded up to a
  multiple of 8), packed per namespace in blocks (``rids`` and ``bits`` blobs of ``cap`` slots,
  16 for a namespace's first block, doubling up to 1,024), written in place through SQLite's
  incremental blob I/O; a removed item's slot gets rid 0 and goes on the namespace's free list
  (``free_slots``), which the next item added to that namespace takes before a new slot. A KNN
  query reads one namespace's
  blocks (about 1 MB for 25,000 items of 256 bits) and computes Hamming distances with numpy;
  ``items.slot`` says where an item's code is (``blk << 16 | i``);
* ``items.emb``: the float32 embedding of each item, for re-ranking the Hamming candidates by
  cosine.

(sqlite-vec's ``vec0`` ``bit[]`` KNN over 25,000 codes took 4.6 ms for k = 96, linear in k, where
numpy takes about 1 ms for any k, measured here 2026-11.)

Version 1 (``PRAGMA user_version`` 0, written until 2026-11) had a global ``rid``, FTS5 over all
tenants' rows and a float ``vec0`` partitioned by tenant. :func:`open_schema` migrates such a file
in one transaction: items keep their ids, bodies and times; live items keep their embeddings
(read back from the old ``vec0``, so nothing is embedded again).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from contextlib import contextmanager
from typing import Any

import apsw
import numpy as np

from activities.memory.items import MemoryItem, text_key

VERSION = 2
NS_BITS = 32
"""``rid = nid << NS_BITS | n``: a namespace holds up to 2**32 - 1 items."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS namespaces (
  nid INTEGER PRIMARY KEY, tenant TEXT NOT NULL, scope TEXT NOT NULL, live INTEGER NOT NULL DEFAULT 0,
  ver INTEGER NOT NULL DEFAULT 0,
  UNIQUE (tenant, scope)
);
CREATE TABLE IF NOT EXISTS items (
  rid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL, scope TEXT NOT NULL,
  body TEXT NOT NULL, idem TEXT, valid_to REAL, expires_at REAL, created REAL NOT NULL,
  norm TEXT, emb BLOB, slot INTEGER
);
CREATE TABLE IF NOT EXISTS codes (
  nid INTEGER NOT NULL, blk INTEGER NOT NULL, cap INTEGER NOT NULL, n INTEGER NOT NULL,
  rids BLOB NOT NULL, bits BLOB NOT NULL, UNIQUE (nid, blk)
);
CREATE TABLE IF NOT EXISTS free_slots (
  nid INTEGER NOT NULL, slot INTEGER NOT NULL, PRIMARY KEY (nid, slot)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS items_idem ON items(tenant, idem) WHERE idem IS NOT NULL;
CREATE INDEX IF NOT EXISTS items_ns ON items(tenant, scope, created);
CREATE INDEX IF NOT EXISTS items_norm ON items(tenant, scope, norm) WHERE valid_to IS NULL;
CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(text, tokenize='porter unicode61');
"""


Row = tuple[Any, ...]
"""A result row: apsw types a column's value as ``SQLiteValue``, read here by column."""


def execute(db: apsw.Connection, sql: str, args: Sequence[Any] | None = None) -> apsw.Cursor:
    """``db.execute(sql, args)``; iterating the cursor gives :data:`Row` values."""
    # apsw's stub types blobs as collections.abc.Buffer (3.12+), Unknown at pythonVersion 3.11:
    return db.execute(sql, args)  # pyright: ignore[reportUnknownMemberType] - apsw's bindings type is Unknown here


def fetchall(db: apsw.Connection, sql: str, args: Sequence[Any] | None = None) -> list[Row]:
    """Every row of ``sql`` (what ``fetchall()`` returns, typed)."""
    return list(execute(db, sql, args))


def bit_dim(dim: int) -> int:
    """``dim`` rounded up to a multiple of 8: the bits of one code (its bytes: that over 8)."""
    return (dim + 7) // 8 * 8


def bits(vec: np.ndarray) -> bytes:
    """The sign bits of a float vector, 8 to a byte (``vec_quantize_binary``'s layout)."""
    v = np.zeros(bit_dim(len(vec)), dtype=np.float32)
    v[: len(vec)] = vec
    return np.packbits(v > 0, bitorder="little").tobytes()


def _tables(db: apsw.Connection) -> set[str]:
    return {r[0] for r in execute(db, "SELECT name FROM sqlite_master WHERE type = 'table'")}


@contextmanager
def write_tx(db: apsw.Connection) -> Generator[None]:
    """A write transaction on ``db``, its lock taken at once (``BEGIN IMMEDIATE``).

    It commits, or rolls back and re-raises. Several worker processes may write one file. A
    deferred transaction that read first could not take the write lock later while another
    process writes (``database is locked`` at once: SQLite's deadlock rule, which the busy
    timeout does not wait out); an immediate one waits up to the busy timeout for the lock.
    """
    execute(db, "BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        execute(db, "ROLLBACK")
        raise
    execute(db, "COMMIT")


def open_schema(db: apsw.Connection) -> None:
    """Create the version-2 schema, or migrate a version-1 file to it (one transaction)."""
    with write_tx(db):
        version = int(str(fetchall(db, "PRAGMA user_version")[0][0]))
        old = version < VERSION and "items" in _tables(db)
        if old:
            execute(
                db,
                "ALTER TABLE items RENAME TO items_v1; DROP INDEX IF EXISTS items_idem; "
                "DROP INDEX IF EXISTS items_ns; DROP TABLE IF EXISTS items_fts",
            )
        listed = "free_slots" in _tables(db)
        execute(db, SCHEMA)
        if old:
            _migrate_v1(db)
        elif not listed:
            _list_free_slots(db)
        execute(db, f"PRAGMA user_version = {VERSION}")


def _list_free_slots(db: apsw.Connection) -> None:
    """Put the removed items' slots of a file written before ``free_slots`` on its free list."""
    for nid, blk, n, rids in fetchall(db, "SELECT nid, blk, n, rids FROM codes"):
        used = np.frombuffer(bytes(rids) if isinstance(rids, bytes) else b"", dtype="<i8")
        for i in np.flatnonzero(used[: _int(n)] == 0):
            execute(
                db,
                "INSERT OR IGNORE INTO free_slots(nid, slot) VALUES (?, ?)",
                (_int(nid), _int(blk) << 16 | int(i)),
            )


def _migrate_v1(db: apsw.Connection) -> None:
    """Copy ``items_v1`` into the new tables (live items indexed), then drop the old tables."""
    has_vec = "items_vec" in _tables(db)
    rows = fetchall(
        db,
        "SELECT rid, id, tenant, scope, body, idem, valid_to, expires_at, created "
        "FROM items_v1 ORDER BY rid",
    )
    for old_rid, iid, tenant, scope, body, idem, valid_to, expires_at, created in rows:
        text = MemoryItem.model_validate_json(str(body)).text
        emb: bytes | None = None
        if has_vec and valid_to is None:
            got = fetchall(db, "SELECT embedding FROM items_vec WHERE rowid = ?", (old_rid,))
            emb = next((bytes(r[0]) for r in got if isinstance(r[0], bytes)), None)
        nid = namespace_id(db, str(tenant), str(scope))
        assert nid is not None  # made when missing
        rid = next_rid(db, nid)
        execute(
            db,
            "INSERT INTO items(rid, id, tenant, scope, body, idem, valid_to, expires_at, created, "
            "norm, emb) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (rid, iid, tenant, scope, body, idem, valid_to, expires_at, created,
             text_key(text), emb),
        )  # fmt: skip
        if valid_to is None and emb is not None:
            index(db, rid, text, np.frombuffer(emb, dtype=np.float32))
    execute(db, "DROP TABLE items_v1")
    if has_vec:
        execute(db, "DROP TABLE items_vec")


def namespace_id(db: apsw.Connection, tenant: str, scope: str, create: bool = True) -> int | None:
    """The ``nid`` of ``(tenant, scope)`` (equality of both), made when missing and ``create``."""
    for (nid,) in execute(
        db, "SELECT nid FROM namespaces WHERE tenant = ? AND scope = ?", (tenant, scope)
    ):
        return int(nid)
    if not create:
        return None
    execute(db, "INSERT INTO namespaces(tenant, scope) VALUES (?, ?)", (tenant, scope))
    nid = db.last_insert_rowid()
    if nid >= 1 << (63 - NS_BITS):
        raise OverflowError("too many memory namespaces in one SQLite file")
    return nid


def rid_range(nid: int) -> tuple[int, int]:
    """The first and last ``rid`` of namespace ``nid``."""
    return nid << NS_BITS, (nid << NS_BITS) | ((1 << NS_BITS) - 1)


def next_rid(db: apsw.Connection, nid: int) -> int:
    """A free ``rid`` in namespace ``nid`` (one past its highest).

    Raises:
        OverflowError: the namespace has used all 2**32 - 1 of its rids.
    """
    lo, hi = rid_range(nid)
    (top,) = fetchall(db, "SELECT max(rid) FROM items WHERE rid BETWEEN ? AND ?", (lo, hi))[0]
    rid = lo + 1 if top is None else int(top) + 1
    if rid > hi:
        raise OverflowError("memory namespace is full")
    return rid


FIRST_CAP, MAX_CAP = 16, 1024
"""Slots of a namespace's first code block, and the most a block grows to (doubling)."""


def _int(v: object) -> int:
    """An INTEGER column's value (typed ``SQLiteValue`` by apsw) as an int."""
    if not isinstance(v, int):
        raise TypeError(f"expected an integer, got {type(v).__name__}")
    return v


def _block(db: apsw.Connection, nid: int, width: int) -> tuple[int, int, int]:
    """``(rowid, blk, n)`` of a block of namespace ``nid`` with a free slot (made when needed)."""
    blk, cap = 0, FIRST_CAP
    for row in fetchall(
        db, "SELECT rowid, blk, cap, n FROM codes WHERE nid = ? ORDER BY blk DESC LIMIT 1", (nid,)
    ):
        rowid, last, size, n = (_int(v) for v in row)
        if n < size:
            return rowid, last, n
        blk, cap = last + 1, min(MAX_CAP, size * 2)
    execute(
        db,
        "INSERT INTO codes(nid, blk, cap, n, rids, bits) VALUES (?, ?, ?, 0, zeroblob(?), "
        "zeroblob(?))",
        (nid, blk, cap, cap * 8, cap * width),
    )
    return db.last_insert_rowid(), blk, 0


def _free_slot(db: apsw.Connection, nid: int) -> tuple[int, int, int] | None:
    """``(rowid, blk, i)`` of a removed item's slot in namespace ``nid``, taken off the free list."""
    for slot, rowid in fetchall(
        db,
        "SELECT f.slot, c.rowid FROM free_slots f JOIN codes c ON c.nid = f.nid "
        "AND c.blk = f.slot >> 16 WHERE f.nid = ? ORDER BY f.slot LIMIT 1",
        (nid,),
    ):
        execute(db, "DELETE FROM free_slots WHERE nid = ? AND slot = ?", (nid, _int(slot)))
        return _int(rowid), _int(slot) >> 16, _int(slot) & 0xFFFF
    return None


def _write(db: apsw.Connection, rowid: int, column: str, offset: int, data: bytes) -> None:
    blob = db.blob_open("main", "codes", column, rowid, True)
    try:
        blob.seek(offset)
        blob.write(data)  # pyright: ignore[reportUnknownMemberType] - apsw types data as Buffer, Unknown at 3.11
    finally:
        blob.close()


def index(db: apsw.Connection, rid: int, text: str, vec: np.ndarray) -> None:
    """Add live item ``rid`` (its ``items`` row written) to the words, codes and live count."""
    nid, code = rid >> NS_BITS, bits(vec)
    execute(db, "INSERT INTO items_fts(rowid, text) VALUES (?, ?)", (rid, text))
    rowid, blk, n = _free_slot(db, nid) or _block(db, nid, len(code))
    _write(db, rowid, "rids", n * 8, rid.to_bytes(8, "little", signed=True))
    _write(db, rowid, "bits", n * len(code), code)
    execute(db, "UPDATE codes SET n = max(n, ?) WHERE rowid = ?", (n + 1, rowid))
    execute(db, "UPDATE items SET slot = ? WHERE rid = ?", (blk << 16 | n, rid))
    execute(db, "UPDATE namespaces SET live = live + 1, ver = ver + 1 WHERE nid = ?", (nid,))


def unindex(db: apsw.Connection, rid: int) -> None:
    """Remove item ``rid`` from the indexes (it must be indexed) and from the live count."""
    nid = rid >> NS_BITS
    execute(db, "DELETE FROM items_fts WHERE rowid = ?", (rid,))
    for slot, rowid in fetchall(
        db,
        "SELECT i.slot, c.rowid FROM items i JOIN codes c ON c.nid = ? AND c.blk = i.slot >> 16 "
        "WHERE i.rid = ? AND i.slot IS NOT NULL",
        (nid, rid),
    ):
        _write(db, _int(rowid), "rids", (_int(slot) & 0xFFFF) * 8, bytes(8))
        execute(db, "INSERT INTO free_slots(nid, slot) VALUES (?, ?)", (nid, _int(slot)))
    execute(db, "UPDATE items SET slot = NULL WHERE rid = ?", (rid,))
    execute(db, "UPDATE namespaces SET live = live - 1, ver = ver + 1 WHERE nid = ?", (nid,))


def codes(db: apsw.Connection, nid: int) -> tuple[np.ndarray, np.ndarray]:
    """Namespace ``nid``'s live items: ``(rids int64 (n,), sign bits uint8 (n, D / 8))``."""
    rids: list[np.ndarray] = []
    mats: list[np.ndarray] = []
    for n, r, b in execute(
        db, "SELECT n, rids, bits FROM codes WHERE nid = ? ORDER BY blk", (nid,)
    ):
        n = _int(n)
        rb, bb = (
            bytes(r) if isinstance(r, bytes) else b"",
            bytes(b) if isinstance(b, bytes) else b"",
        )
        rids.append(np.frombuffer(rb, dtype="<i8", count=n))
        width = len(bb) // max(1, len(rb) // 8)
        mats.append(np.frombuffer(bb, dtype=np.uint8, count=n * width).reshape(n, width))
    if not rids:
        return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.uint8)
    rid, mat = np.concatenate(rids), np.concatenate(mats)
    keep = rid != 0
    return rid[keep], mat[keep]
