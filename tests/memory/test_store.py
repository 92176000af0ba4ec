"""The memory store: hybrid search, add-only supersede, real deletes, TTL, idempotency, and
tenants that never see each other, tried as an attacker would (issue #21).

One suite, both backends: SQLite (the embedded default) and a real PostgreSQL with pgvector,
started by the tests from the ``pgserver`` wheel (PostgreSQL 16 with ``vector.so``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from activities.memory import MemoryItem, Namespace, WordLlamaEmbedder
from activities.memory.pg_store import PostgresMemoryStore
from activities.memory.sqlite_store import SqliteMemoryStore

EMB = WordLlamaEmbedder()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        yield SqliteMemoryStore(tmp_path / "m.db", EMB)
        return
    pg = PostgresMemoryStore(request.getfixturevalue("postgres_url"), EMB)
    try:
        yield pg
    finally:
        pg.close()


def ns(tenant: str, who: str) -> Namespace:
    return Namespace(tenant_id=tenant, scope=f"user:{who}")


def test_hybrid_search_finds_by_words_and_by_meaning(
    store: SqliteMemoryStore | PostgresMemoryStore,
):
    a = ns("t1", "alice")
    for text in [
        "The project database is PostgreSQL 15.",
        "Alice prefers tabs over spaces in Python code.",
        "Deployments go to the staging-eu cluster first.",
        "Her cat is called Miso.",
    ]:
        store.put(MemoryItem(namespace=a, text=text))
    assert store.search([a], "which database do we use?", 1)[0].item.text.startswith(
        "The project database"
    )
    assert (
        "Miso"
        in store.search([a], "pet's name", 2)[0].item.text
        + store.search([a], "pet's name", 2)[1].item.text
    )
    assert store.search([a], "", 3) == []
    assert len(store.search([a], "staging", 10)) <= 4


def test_supersede_keeps_the_old_fact_closed_and_delete_is_real(
    store: SqliteMemoryStore | PostgresMemoryStore,
):
    a = ns("t1", "bob")
    old = store.put(MemoryItem(namespace=a, text="Bob's editor is vim."))
    new = store.supersede(old.id, MemoryItem(namespace=a, text="Bob's editor is helix now."))
    closed = store.get("t1", old.id)
    assert closed is not None and closed.valid_to and closed.superseded_by == new.id
    assert [h.item.id for h in store.search([a], "editor", 5)] == [new.id]
    assert [i.id for i in store.list(a, include_superseded=True)] == [new.id, old.id]
    with pytest.raises(KeyError):
        store.supersede(old.id, MemoryItem(namespace=a, text="again"))
    assert store.delete("t1", new.id) and store.get("t1", new.id) is None
    assert store.search([a], "helix", 5) == []


def test_idempotent_writes_and_ttl(store: SqliteMemoryStore | PostgresMemoryStore):
    a = ns("t1", "carol")
    one = store.put(
        MemoryItem(
            namespace=a, text="Carol works on the billing service.", idempotency_key="run-1/3"
        )
    )
    two = store.put(
        MemoryItem(
            namespace=a, text="Carol works on the billing service.", idempotency_key="run-1/3"
        )
    )
    assert one.id == two.id and len(store.list(a)) == 1
    store.put(
        MemoryItem(namespace=a, text="A temporary note about billing.", expires_at=time.time() - 1)
    )
    assert all("temporary" not in h.item.text for h in store.search([a], "billing note", 5))


NASTY = ["%", "_", "a%", "a_b", "/", "../b", "..", "'", '"', "' OR 1=1 --", "a" * 500, "b*", "NEAR"]


@pytest.mark.parametrize("victim_tenant", ["acme", "acme%", "acme_"])
def test_a_tenant_never_reaches_another_tenants_items(
    store: SqliteMemoryStore | PostgresMemoryStore, victim_tenant: str
):
    secret = "The acquisition target is Globex, closing on Friday."
    store.put(MemoryItem(namespace=ns(victim_tenant, "ceo"), text=secret))
    for tenant in ["acm", "acme ", "ACME", *NASTY]:
        if tenant == victim_tenant:
            continue
        for who in ["ceo", *NASTY]:
            hits = store.search([ns(tenant, who)], "acquisition target Globex Friday", 10)
            assert hits == [], (tenant, who)
            assert store.list(ns(tenant, who)) == []
        assert store.namespaces(tenant) == []
    for q in ["%", "_", '"', "*", "Globex OR acme", "NEAR(Globex)", "' OR 1=1 --"]:
        assert store.search([ns("other", "ceo")], q, 10) == []
    assert store.search([ns(victim_tenant, "ceo")], "Globex", 1)[0].item.text == secret
    item = store.list(ns(victim_tenant, "ceo"))[0]
    assert store.get("other", item.id) is None and not store.delete("other", item.id)


def test_the_same_fact_is_stored_once_while_it_is_live(
    store: SqliteMemoryStore | PostgresMemoryStore,
):
    a, b = ns("t1", "dave"), ns("t1", "erin")
    one = store.put(MemoryItem(namespace=a, text="Dave drinks oat milk lattes."))
    again = store.put(MemoryItem(namespace=a, text="  Dave drinks oat\n milk   lattes. "))
    assert again.id == one.id and [i.id for i in store.list(a)] == [one.id]
    assert store.put(MemoryItem(namespace=a, text="Dave drinks oat milk lattes!")).id != one.id
    assert store.put(MemoryItem(namespace=b, text="Dave drinks oat milk lattes.")).id != one.id
    assert store.put(MemoryItem(namespace=ns("t2", "dave"), text=one.text)).id != one.id
    new = store.supersede(one.id, MemoryItem(namespace=a, text="Dave drinks black coffee."))
    back = store.put(MemoryItem(namespace=a, text=one.text))  # the old fact is true again
    assert back.id not in (one.id, new.id)
    gone = store.put(
        MemoryItem(namespace=b, text="A note that expired.", expires_at=time.time() - 1)
    )
    assert store.put(MemoryItem(namespace=b, text=gone.text)).id != gone.id
    assert sorted(i.text for i in store.list(a)) == sorted(
        ["Dave drinks oat milk lattes!", "Dave drinks black coffee.", one.text]
    )


def test_a_postgres_table_without_the_text_key_column_is_upgraded(postgres_url: str):
    import psycopg

    a = ns("t1", "gina")
    first = PostgresMemoryStore(postgres_url, EMB)
    one = first.put(MemoryItem(namespace=a, text="Gina's team is payments."))
    first.close()
    with psycopg.connect(postgres_url, autocommit=True) as db:  # as the first version made it
        db.execute("DROP INDEX memory_items_norm; ALTER TABLE memory_items DROP COLUMN norm")
    store = PostgresMemoryStore(postgres_url, EMB)
    try:
        assert store.put(MemoryItem(namespace=a, text="Gina's team is  payments.")).id == one.id
        assert [i.id for i in store.list(a)] == [one.id]
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_copies_written_before_deduplication_are_merged_when_the_store_opens(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
):
    """An older version stored each put (as ``_insert`` does): reopening keeps the oldest copy."""

    def open_store() -> Any:
        if backend == "sqlite":
            return SqliteMemoryStore(tmp_path / "m.db", EMB)
        return PostgresMemoryStore(request.getfixturevalue("postgres_url"), EMB)

    a, b = ns("t1", "hank"), ns("t1", "iris")
    old = open_store()
    copies = [
        MemoryItem(namespace=a, text="Hank's favourite module is shlex.py.", created=100.0 + i)
        for i in range(3)
    ]
    other = MemoryItem(namespace=b, text=copies[0].text, created=50.0)  # another namespace
    with old._lock:  # noqa: SLF001 - written as the version before deduplication wrote them
        for item in [*copies, other]:
            vec = EMB.embed([item.text])[0]
            if backend == "sqlite":
                with old._tx():  # noqa: SLF001
                    old._insert(item, vec)  # noqa: SLF001
            else:
                old._insert(item, vec)  # noqa: SLF001
    assert len(old.list(a)) == 3
    old.close()
    store = open_store()
    try:
        assert [i.id for i in store.list(a)] == [copies[0].id]  # the oldest stays
        assert [i.id for i in store.list(b)] == [other.id]  # other namespaces untouched
        for later in copies[1:]:
            closed = store.get("t1", later.id)
            assert closed is not None and closed.valid_to is not None
            assert closed.superseded_by == copies[0].id
        hits = store.search([a], "favourite module shlex", limit=5)
        assert [h.item.id for h in hits] == [copies[0].id]
        assert store.put(MemoryItem(namespace=a, text=copies[0].text)).id == copies[0].id
    finally:
        store.close()


def test_a_lone_surrogate_or_a_megabyte_of_query_is_searched_not_a_crash(
    store: SqliteMemoryStore | PostgresMemoryStore,
):
    store.put(MemoryItem(namespace=ns("acme", "ann"), text="Ann's cat is called Miso."))
    for q in ["\ud800 Miso", "Miso \udcff", "cat " * 250_000 + "Miso"]:
        hits = store.search([ns("acme", "ann")], q, 3)  # TypeError/UnicodeEncodeError before
        assert [h.item.text for h in hits] == ["Ann's cat is called Miso."], q[:20]
