"""Runs waiting for consolidation are shared by the workers of a PostgreSQL memory store.

``memory.handoff`` runs on the worker of the run's workflow task, ``memory.consolidate`` on any
worker of the queue: kept in one host's state folder, the transcript was not found on the other
host and the run's facts were lost (seen with two state folders, ``make chaos --two-hosts``).
"""

from __future__ import annotations

from pathlib import Path

from activities.memory.consolidation import HandoffInput, Pending, SharedPending, pending_for


def _run(run_id: str, tenant: str = "t1") -> HandoffInput:
    msgs = [{"role": "user", "content": "I sail on Sundays"}]
    return HandoffInput(run_id=run_id, tenant_id=tenant, principal_id="ann", agent="a",
                        model="m", scopes=["user:ann"], messages=msgs)  # fmt: skip


def test_a_run_kept_on_one_host_is_read_and_forgotten_on_another(postgres_url: str, tmp_path: Path):
    host_a = pending_for(str(tmp_path / "a"), postgres_url)
    host_b = pending_for(str(tmp_path / "b"), postgres_url)
    assert isinstance(host_a, SharedPending) and isinstance(host_b, SharedPending)
    host_a.add(_run("r1"))
    host_a.add(_run("r1"))  # a retried handoff changes nothing
    got = host_b.get("t1", "r1")
    assert got is not None and got.messages[0]["content"] == "I sail on Sundays"
    assert host_b.get("t2", "r1") is None  # another tenant's run is not found
    host_b.done("r1")
    assert host_a.get("t1", "r1") is None
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # nothing local


def test_a_sqlite_store_keeps_them_in_the_state_folder(tmp_path: Path):
    pending = pending_for(str(tmp_path), f"sqlite://{tmp_path / 'memory.db'}")
    assert isinstance(pending, Pending)
    pending.add(_run("r1"))
    assert (tmp_path / "memory-pending.db").is_file()
    assert pending_for(str(tmp_path), None).get("t1", "r1") is not None
