"""What the runtime keeps beside its secrets is for its owner only: the console's token never
reaches a log, and logs, the memory store and the local Temporal database are mode 0600.

Found by an outside probe (2026-11-27): ``make demo``'s ``logs/console.log`` (mode 0644) held the
console's ``?token=`` login link, and ``memory.db`` (0644) every person's memories in clear text.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from activities.memory.consolidation import Pending
from activities.memory.embed import WordLlamaEmbedder
from activities.memory.items import MemoryItem, Namespace
from activities.memory.sqlite_store import SqliteMemoryStore
from activities.private_files import private_dir, private_file
from workers.console import auth as ca
from workers.local import procs, supervisor

NS = Namespace(tenant_id="acme", scope="user:alice")


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_a_private_file_is_created_0600_and_an_existing_one_is_tightened(tmp_path: Path):
    fresh = private_file(tmp_path / "a" / "new.log")
    assert fresh.exists() and mode(fresh) == 0o600
    old = tmp_path / "old.db"
    old.write_text("x")
    wal = tmp_path / "old.db-wal"
    wal.write_text("y")
    os.chmod(old, 0o644)
    os.chmod(wal, 0o644)
    private_file(old, sqlite=True)
    assert (mode(old), mode(wal)) == (0o600, 0o600)
    assert old.read_text() == "x"  # tightened, not truncated
    assert mode(private_dir(tmp_path / "logs")) == 0o700


def test_the_memory_store_and_its_write_ahead_log_are_the_owners_only(tmp_path: Path):
    path = tmp_path / "state" / "memory.db"
    store = SqliteMemoryStore(path, WordLlamaEmbedder())
    store.put(MemoryItem(namespace=NS, text="my favourite module is shlex.py"))
    side = [p for p in tmp_path.joinpath("state").iterdir() if p.name != "memory.db"]
    assert side, "SQLite in WAL mode keeps side files while open"
    assert {p.name: mode(p) for p in [path, *side]} == {p.name: 0o600 for p in [path, *side]}
    Pending(tmp_path / "state" / "memory-pending.db")
    assert mode(tmp_path / "state" / "memory-pending.db") == 0o600


def test_a_log_written_with_0644_before_is_0600_once_a_process_writes_to_it(tmp_path: Path):
    log = tmp_path / "server.log"
    log.write_text("old\n")
    os.chmod(log, 0o644)
    proc = supervisor.spawn(["sh", "-c", "echo started"], log, detach=False)
    assert proc.wait(timeout=10) == 0
    assert mode(log) == 0o600
    assert log.read_text() == "old\nstarted\n"


async def test_the_console_started_in_the_background_logs_no_token(
    tmp_path: Path, dev_server_address: str, monkeypatch: pytest.MonkeyPatch
):
    state = tmp_path / "state"
    monkeypatch.setenv("AGENT_STATE_DIR", str(state))
    monkeypatch.setenv("TEMPORAL_ADDRESS", dev_server_address)
    token = ca.load_or_create_token(state)
    await asyncio.to_thread(
        procs.start_background, "console", "workers.cli serve --port 0", "run console:", 60
    )
    try:
        text = procs.log_file("console").read_text()
    finally:
        assert procs.stop("console")
    assert "run console: http://127.0.0.1:" in text
    assert token not in text
    assert str(ca.token_file(state)) in text  # where to find it instead
    assert mode(procs.log_file("console")) == 0o600
    assert mode(state / "logs") == 0o700
