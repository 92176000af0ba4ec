"""The SQLite store's namespace-clustered schema: files of the first schema open (migrated), and
common words are handled without losing the items that hold the rare ones (issue #21)."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import numpy as np
import pytest
import sqlite_vec

from activities.memory import MemoryItem, Namespace, WordLlamaEmbedder
from activities.memory import sqlite_store as ss
from activities.memory.sqlite_store import SqliteMemoryStore

EMB = WordLlamaEmbedder()
V1_SCHEMA = """
CREATE TABLE items (
  rid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, tenant TEXT NOT NULL, scope TEXT NOT NULL,
  body TEXT NOT NULL, idem TEXT, valid_to REAL, expires_at REAL, created REAL NOT NULL
);
CREATE UNIQUE INDEX items_idem ON items(tenant, idem) WHERE idem IS NOT NULL;
CREATE INDEX items_ns ON items(tenant, scope, created);
CREATE VIRTUAL TABLE items_fts USING fts5(text, tokenize='porter unicode61');
CREATE VIRTUAL TABLE items_vec USING vec0(tenant TEXT partition key, scope TEXT,
  embedding float[256] distance_metric=cosine);
"""


def _v1_file(path: Path, items: list[MemoryItem]) -> None:
    """A memory.db as the first schema wrote it (the code of commit 0a17031, inlined)."""
    db = apsw.Connection(str(path))
    db.enable_load_extension(True)
    db.load_extension(sqlite_vec.loadable_path())
    with db:
        db.execute(V1_SCHEMA)
        for it in items:
            ns = it.namespace
            db.execute(
                "INSERT INTO items(id, tenant, scope, body, idem, valid_to, expires_at, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (it.id, ns.tenant_id, ns.scope, it.model_dump_json(), it.idempotency_key,
                 it.valid_to, it.expires_at, it.created),
            )  # fmt: skip
            rid = db.last_insert_rowid()
            if it.valid_to is None:
                db.execute("INSERT INTO items_fts(rowid, text) VALUES (?, ?)", (rid, it.text))
                db.execute(
                    "INSERT INTO items_vec(rowid, tenant, scope, embedding) VALUES (?, ?, ?, ?)",
                    (rid, ns.tenant_id, ns.scope, EMB.embed([it.text])[0].tobytes()),
                )
    db.close()


def test_a_file_of_the_first_schema_opens_migrated(tmp_path: Path):
    a, b = (
        Namespace(tenant_id="acme", scope="user:ann"),
        Namespace(tenant_id="acme%", scope="user:ann"),
    )
    old = MemoryItem(namespace=a, text="Ann's laptop is a ThinkPad.", valid_to=1.0,
                     superseded_by="mem-new", idempotency_key="run/1/0")  # fmt: skip
    items = [
        old,
        MemoryItem(namespace=a, text="Ann's laptop is a MacBook.", id="mem-new"),
        MemoryItem(namespace=a, text="Ann takes the train to Utrecht."),
        MemoryItem(namespace=b, text="The other tenant's secret: project Zephyr."),
    ]
    _v1_file(tmp_path / "m.db", items)
    store = SqliteMemoryStore(tmp_path / "m.db", EMB)
    found = [h.item.id for h in store.search([a], "laptop", 5)]
    assert found[0] == "mem-new" and old.id not in found and len(found) == 2
    assert store.search([a], "train Utrecht", 1)[0].item.text == "Ann takes the train to Utrecht."
    assert all(h.item.namespace == a for h in store.search([a], "secret project Zephyr", 10))
    assert [h.item.namespace for h in store.search([b], "Zephyr", 5)] == [b]
    got = store.get("acme", old.id)
    assert got is not None and got.valid_to == 1.0 and got.superseded_by == "mem-new"
    assert store.put(MemoryItem(namespace=a, text="x", idempotency_key="run/1/0")).id == old.id
    assert len(store.list(a, include_superseded=True)) == 3
    added = store.put(MemoryItem(namespace=a, text="Ann's desk is by the window."))
    assert store.search([a], "desk window", 1)[0].item.id == added.id
    store.close()
    db = apsw.Connection(str(tmp_path / "m.db"))
    assert db.execute("PRAGMA user_version").fetchall()[0][0] == 2
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "items_v1" not in tables and "items_vec" not in tables
    db.close()
    again = SqliteMemoryStore(tmp_path / "m.db", EMB)  # a second open changes nothing
    assert len(again.list(a, include_superseded=True)) == 4
    again.close()


def test_common_words_do_not_crowd_out_rare_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(ss, "COMMON_MIN_DOCS", 5)
    store = SqliteMemoryStore(tmp_path / "m.db", EMB)
    a = Namespace(tenant_id="t", scope="user:u")
    for i in range(12):
        store.put(MemoryItem(namespace=a, text=f"note alpha {i}" if i % 2 else f"note beta {i}"))
    both = store.put(MemoryItem(namespace=a, text="note alpha beta together"))
    rare = store.put(MemoryItem(namespace=a, text="a zebra in the garden"))
    row = store._db.execute("SELECT nid, live, ver FROM namespaces").fetchall()[0]  # noqa: SLF001
    nid, live = (int(str(row[0])), int(str(row[2]))), int(str(row[1]))
    assert live == 14
    bm25 = store._bm25  # noqa: SLF001 - the word ranking alone, without the vectors
    ids = {r[0]: json.loads(r[1])["id"] for r in store._db.execute("SELECT rid, body FROM items")}  # noqa: SLF001
    notes = [ids[r] for r in sorted(ids, reverse=True) if ids[r] != rare.id]  # newest first
    # "note" is in 13 of 14 items: common; "zebra" is rare, so it ranks first, alone by bm25, and
    # the items holding the common word follow (newest first) to fill the candidates
    assert [ids[r] for r in bm25(nid, live, ["note", "zebra"], 10)] == [rare.id, *notes[:9]]
    assert [ids[r] for r in bm25(nid, live, ["note", "zebra"], 1)] == [rare.id]
    assert [ids[r] for r in bm25(nid, live, ["note", "nosuchword"], 3)] == notes[:3]
    # only common words: all of them are required
    assert [ids[r] for r in bm25(nid, live, ["note", "alpha", "beta"], 10)] == [both.id]
    # under the threshold every word counts (plain OR)
    monkeypatch.setattr(ss, "COMMON_MIN_DOCS", 1000)
    assert len(bm25(nid, live, ["note", "zebra"], 20)) == 14
    assert np.isfinite(store.search([a], "zebra", 1)[0].score)
    store.close()


def test_codes_and_counts_follow_every_write(tmp_path: Path):
    from activities.memory import sqlite_schema as sch

    store = SqliteMemoryStore(tmp_path / "m.db", EMB)
    a, b = Namespace(tenant_id="t", scope="user:a"), Namespace(tenant_id="t", scope="user:b")
    items = [
        store.put(MemoryItem(namespace=a, text=f"fact number {i} about {i * 7}")) for i in range(40)
    ]
    store.put(MemoryItem(namespace=b, text="fact number 3 about 21, in b"))
    store.delete("t", items[0].id)
    new = store.supersede(items[1].id, MemoryItem(namespace=a, text="the harbour is in Leith"))
    store.edit("t", items[2].id, "the violin is a Stradivarius")
    store.put(MemoryItem(namespace=a, text="closed already", valid_to=1.0))
    db = store._db  # noqa: SLF001 - the index tables themselves
    nid = sch.namespace_id(db, "t", "user:a", create=False)
    assert nid is not None
    rids, codes = sch.codes(db, nid)
    live = {
        int(str(r[0]))
        for r in db.execute(
            "SELECT rid FROM items WHERE tenant = 't' AND scope = 'user:a' AND valid_to IS NULL"
        )
    }
    assert sorted(rids.tolist()) == sorted(live) and len(live) == 39 and codes.shape == (39, 32)
    blocks = db.execute("SELECT blk, cap FROM codes WHERE nid = ? ORDER BY blk", (nid,)).fetchall()
    assert [(int(str(x)), int(str(c))) for x, c in blocks] == [(0, 16), (1, 32)]
    assert db.execute("SELECT live FROM namespaces WHERE nid = ?", (nid,)).fetchall()[0][0] == 39
    assert store.search([a], "harbour Leith", 1)[0].item.id == new.id
    assert store.search([a], "violin", 1)[0].item.id == items[2].id
    assert all(h.item.namespace == a for h in store.search([a], "fact number 3 about 21", 50))
    store.close()


def test_a_second_connection_sees_another_ones_writes_by_meaning(tmp_path: Path):
    a = Namespace(tenant_id="t", scope="user:a")
    one, two = SqliteMemoryStore(tmp_path / "m.db", EMB), SqliteMemoryStore(tmp_path / "m.db", EMB)
    one.put(MemoryItem(namespace=a, text="The invoice is due on Monday."))
    old = one.put(MemoryItem(namespace=a, text="Backups run nightly at two."))
    assert len(one.search([a], "kitten", 5)) == 2  # the namespace's codes are now kept
    cat = two.put(MemoryItem(namespace=a, text="Their cat is a small grey tabby."))
    assert cat.id in [h.item.id for h in one.search([a], "kitten", 5)]  # by the vector alone
    two.edit("t", old.id, "The dog sleeps in the hall.")  # the same count of items
    ids = [h.item.id for h in one.search([a], "puppy", 5)]
    assert old.id in ids and len(ids) == 3
    one.close()
    two.close()


def test_a_removed_items_slot_is_taken_by_the_next_item(tmp_path: Path):
    from activities.memory import sqlite_schema as sch

    path, a = tmp_path / "m.db", Namespace(tenant_id="t", scope="user:a")
    store = SqliteMemoryStore(path, EMB)
    items = [
        store.put(MemoryItem(namespace=a, text=f"note {i} on topic {i * 3}")) for i in range(20)
    ]
    db = store._db  # noqa: SLF001 - the index tables themselves
    nid = sch.namespace_id(db, "t", "user:a", create=False)
    assert nid is not None

    def slots() -> int:
        return int(
            str(db.execute("SELECT sum(n) FROM codes WHERE nid = ?", (nid,)).fetchall()[0][0])
        )

    assert slots() == 20
    for it in items[:5]:
        store.delete("t", it.id)
    fresh = [
        store.put(MemoryItem(namespace=a, text=f"the boat number {i} is red")) for i in range(5)
    ]
    assert slots() == 20  # the five freed slots were taken, none added
    rids, codes = sch.codes(db, nid)
    assert len(rids) == 20 and codes.shape[0] == 20
    assert store.search([a], "the boat number 3 is red", 1)[0].item.id == fresh[3].id
    assert all(h.item.id not in {i.id for i in items[:5]} for h in store.search([a], "note", 50))
    # a file written before the free list: its removed items' slots are listed when it opens
    store.delete("t", items[5].id)
    store.delete("t", items[6].id)
    db.execute("DROP TABLE free_slots")
    store.close()
    store = SqliteMemoryStore(path, EMB)
    db = store._db  # noqa: SLF001
    listed = db.execute("SELECT count(*) FROM free_slots WHERE nid = ?", (nid,)).fetchall()[0][0]
    assert listed == 2
    store.put(MemoryItem(namespace=a, text="one more note"))
    assert slots() == 20
    assert len(sch.codes(db, nid)[0]) == 19
    store.close()
