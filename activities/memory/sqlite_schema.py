"""The SQLite memory store's schema (version 2) and the migration from version 1.

Version 2 clusters every index by namespace. Each namespace ``(tenant, scope)`` gets an integer
``nid`` (table ``namespaces``, which also counts its live items), and an item's ``rid`` is
``nid << 32 | n`` (``n`` from 1 within the namespace). So:

* ``items_fts`` (FTS5, rowid ``rid``): one namespace's postings are one contiguous rowid range of
  every term's doclist, and ``rowid BETWEEN lo AND hi`` makes FTS5 read only that slice;
* ``items_bits`` (sqlite-vec ``vec0``): ``nid`` is its partition key, the vector a ``bit[D]``
  (sign bits of the embedding, D rounded up to a multiple of 8): a KNN query scans one
  namespace's 32-byte codes (D = 256) by Hamming distance;
* ``items.emb``: the float32 embedding of each item, for rescoring the bit-KNN's candidates by
  cosine.

Version 1 (``PRAGMA user_version`` 0, written until 2026-11) had a global ``rid``, FTS5 over all
tenants' rows and a float ``vec0`` partitioned by tenant. :func:`open_schema` migrates such a file
in one transaction: items keep their ids, bodies and times; live items keep their embeddings
(read back from the old ``vec0``, so nothing is embedded again).
"""

from __future__ import annotations

import apsw
import numpy as np

from activities.memory.items import MemoryItem, text_key

VERSION = 2
NS_BITS = 32
"""``rid = nid << NS_BITS | n``: a namespace holds up to 2**32 - 1 items."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS namespaces (
  nid INTEGER PRIMARY KEY, tenant TEXT NOT NULL, scope TEXT NOT NULL, live INTEGER NOT NULL DEFAULT 0,
  UNIQUE (tenant, scope)
);
CREATE TABLE IF NOT EXISTS items (
  rid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL, scope TEXT NOT NULL,
  body TEXT NOT NULL, idem TEXT, valid_to REAL, expires_at REAL, created REAL NOT NULL,
  norm TEXT, emb BLOB
);
CREATE UNIQUE INDEX IF NOT EXISTS items_idem ON items(tenant, idem) WHERE idem IS NOT NULL;
CREATE INDEX IF NOT EXISTS items_ns ON items(tenant, scope, created);
CREATE INDEX IF NOT EXISTS items_norm ON items(tenant, scope, norm) WHERE valid_to IS NULL;
CREATE VIRTUAL TABLE IF NOT EXISTS items_fts USING fts5(text, tokenize='porter unicode61');
"""


def bit_dim(dim: int) -> int:
    """``dim`` rounded up to a multiple of 8 (the width of the ``bit[]`` column)."""
    return (dim + 7) // 8 * 8


def bits(vec: np.ndarray) -> bytes:
    """The sign bits of a float vector, 8 to a byte (``vec_quantize_binary``'s layout)."""
    v = np.zeros(bit_dim(len(vec)), dtype=np.float32)
    v[: len(vec)] = vec
    return np.packbits(v > 0, bitorder="little").tobytes()


def _tables(db: apsw.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def open_schema(db: apsw.Connection, dim: int) -> None:
    """Create the version-2 schema, or migrate a version-1 file to it (one transaction)."""
    with db:
        version = int(str(db.execute("PRAGMA user_version").fetchall()[0][0]))
        old = version < VERSION and "items" in _tables(db)
        if old:
            db.execute(
                "ALTER TABLE items RENAME TO items_v1; DROP INDEX IF EXISTS items_idem; "
                "DROP INDEX IF EXISTS items_ns; DROP TABLE IF EXISTS items_fts"
            )
        db.execute(SCHEMA)
        db.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS items_bits USING vec0("
            f"nid INTEGER partition key, embedding bit[{bit_dim(dim)}])"
        )
        if old:
            _migrate_v1(db)
        db.execute(f"PRAGMA user_version = {VERSION}")


def _migrate_v1(db: apsw.Connection) -> None:
    """Copy ``items_v1`` into the new tables (live items indexed), then drop the old tables."""
    has_vec = "items_vec" in _tables(db)
    rows = db.execute(
        "SELECT rid, id, tenant, scope, body, idem, valid_to, expires_at, created "
        "FROM items_v1 ORDER BY rid"
    ).fetchall()
    for old_rid, iid, tenant, scope, body, idem, valid_to, expires_at, created in rows:
        text = MemoryItem.model_validate_json(str(body)).text
        emb: bytes | None = None
        if has_vec and valid_to is None:
            got = db.execute("SELECT embedding FROM items_vec WHERE rowid = ?", (old_rid,))
            emb = next((bytes(r[0]) for r in got.fetchall() if isinstance(r[0], bytes)), None)
        nid = namespace_id(db, str(tenant), str(scope))
        assert nid is not None  # made when missing
        rid = next_rid(db, nid)
        db.execute(
            "INSERT INTO items(rid, id, tenant, scope, body, idem, valid_to, expires_at, created, "
            "norm, emb) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (rid, iid, tenant, scope, body, idem, valid_to, expires_at, created,
             text_key(text), emb),
        )  # fmt: skip
        if valid_to is None and emb is not None:
            index(db, rid, text, np.frombuffer(emb, dtype=np.float32))
    db.execute("DROP TABLE items_v1")
    if has_vec:
        db.execute("DROP TABLE items_vec")


def namespace_id(db: apsw.Connection, tenant: str, scope: str, create: bool = True) -> int | None:
    """The ``nid`` of ``(tenant, scope)`` (equality of both), made when missing and ``create``."""
    for (nid,) in db.execute(
        "SELECT nid FROM namespaces WHERE tenant = ? AND scope = ?", (tenant, scope)
    ):
        return int(nid)
    if not create:
        return None
    db.execute("INSERT INTO namespaces(tenant, scope) VALUES (?, ?)", (tenant, scope))
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
    (top,) = db.execute(
        "SELECT max(rid) FROM items WHERE rid BETWEEN ? AND ?", (lo, hi)
    ).fetchall()[0]
    rid = lo + 1 if top is None else int(top) + 1
    if rid > hi:
        raise OverflowError("memory namespace is full")
    return rid


def index(db: apsw.Connection, rid: int, text: str, vec: np.ndarray) -> None:
    """Add live item ``rid`` to the word and vector indexes and to its namespace's live count."""
    nid = rid >> NS_BITS
    db.execute("INSERT INTO items_fts(rowid, text) VALUES (?, ?)", (rid, text))
    db.execute(
        "INSERT INTO items_bits(rowid, nid, embedding) VALUES (?, ?, vec_bit(?))",
        (rid, nid, bits(vec)),
    )
    db.execute("UPDATE namespaces SET live = live + 1 WHERE nid = ?", (nid,))


def unindex(db: apsw.Connection, rid: int) -> None:
    """Remove item ``rid`` from the indexes (it must be indexed) and from the live count."""
    db.execute("DELETE FROM items_fts WHERE rowid = ?", (rid,))
    db.execute("DELETE FROM items_bits WHERE rowid = ?", (rid,))
    db.execute("UPDATE namespaces SET live = live - 1 WHERE nid = ?", (rid >> NS_BITS,))
