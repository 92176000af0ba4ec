"""``agentctl memory``: people list, search, edit and delete; deletes are real and audited."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from activities.memory import MemoryItem, Namespace, open_store


def agentctl(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENT_STATE_DIR": str(state)}
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", "memory", *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def test_people_see_fix_and_delete_memory_per_tenant(tmp_path: Path):
    store = open_store(f"sqlite://{tmp_path / 'memory.db'}")
    mine = store.put(
        MemoryItem(
            namespace=Namespace(tenant_id="acme", scope="user:ann"), text="Ann deploys on Fridays."
        )
    )
    store.put(
        MemoryItem(
            namespace=Namespace(tenant_id="other", scope="user:ann"),
            text="Other tenant's secret plan.",
        )
    )
    out = agentctl(tmp_path, "list", "--tenant", "acme", "--principal", "ann", "--json")
    assert out.returncode == 0, out.stderr
    assert [i["text"] for i in json.loads(out.stdout)] == ["Ann deploys on Fridays."]
    out = agentctl(
        tmp_path, "search", "secret plan", "--tenant", "acme", "--principal", "ann", "--json"
    )
    assert "Other tenant" not in out.stdout
    assert agentctl(tmp_path, "show", mine.id, "--tenant", "other").returncode == 1
    assert agentctl(tmp_path, "delete", mine.id, "--tenant", "other").returncode == 1
    assert (
        agentctl(
            tmp_path, "edit", mine.id, "Ann deploys on Thursdays.", "--tenant", "acme"
        ).returncode
        == 0
    )
    assert agentctl(tmp_path, "delete", mine.id, "--tenant", "acme").returncode == 0
    assert store.get("acme", mine.id) is None
    audit = [json.loads(x) for x in (tmp_path / "memory-audit.jsonl").read_text().splitlines()]
    assert [a["event"] for a in audit] == ["memory_edited", "memory_deleted"]
    assert audit[1]["item"]["text"] == "Ann deploys on Thursdays."
    assert agentctl(tmp_path, "list", "--tenant", "acme").returncode == 2
