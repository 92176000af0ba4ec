"""Idempotent side effects: run_once and its ledger (activities/tools/ledger.py)."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from activities.tools import (
    LEDGER_DIR,
    ToolContext,
    run_once,
)
from activities.tools.ledger import ledger_path
from tests.support.tool_calls import err, ok

# --------------------------------------------------------------------------- idempotency


async def test_write_file_retried_call_is_applied_once(ws):
    """The same call invoked twice (as a Temporal retry would) writes once; others still write."""
    call = ToolContext(workspace=ws, run_id="wf-1", call_id="c1", idempotency_key="wf-1/c1")
    args = {"path": "out.txt", "content": "first", "overwrite": True}
    first = await ok("write_file", args, call)
    (ws / "out.txt").write_text("changed by a later call")  # then the first call is retried
    again = await ok("write_file", args, call)
    assert again == first == "Wrote out.txt (5 bytes, 1 lines)."
    assert (ws / "out.txt").read_text() == "changed by a later call"  # not applied a second time
    other = ToolContext(workspace=ws, run_id="wf-1", call_id="c2", idempotency_key="wf-1/c2")
    await ok("write_file", args, other)
    assert (ws / "out.txt").read_text() == "first"
    # a refused attempt records nothing: the retry after the cause is gone applies it
    blocked = ToolContext(workspace=ws, call_id="c3", idempotency_key="wf-1/c3")
    (ws / "dir").write_text("a file where a folder should be")
    assert "in the way" in await err("write_file", {"path": "dir/x", "content": "y"}, blocked)
    (ws / "dir").unlink()
    await ok("write_file", {"path": "dir/x", "content": "y"}, blocked)
    assert (ws / "dir/x").read_text() == "y"


async def test_ledger_is_out_of_the_tools_reach(ws):
    call = ToolContext(workspace=ws, call_id="c1", idempotency_key="wf-1/c1")
    await ok("write_file", {"path": "a.txt", "content": "x"}, call)
    assert (ws / LEDGER_DIR).is_dir()
    assert LEDGER_DIR not in await ok("list_files", {"recursive": True}, call)
    for tool_name, extra in (("read_file", {}), ("write_file", {"content": "x"})):
        msg = await err(tool_name, {"path": f"{LEDGER_DIR}/x.json", **extra}, call)
        assert "reserved" in msg
    assert "reserved" in await err("list_files", {"path": f"sub/../{LEDGER_DIR}"}, call)


def test_run_once_serialises_concurrent_attempts(ws):
    applied = []
    ctx = ToolContext(workspace=ws, idempotency_key="wf/c")

    def effect() -> str:
        applied.append(1)
        return f"applied {len(applied)}"

    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(run_once(ctx, effect))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert applied == [1] and results == ["applied 1"] * 8
    assert run_once(ToolContext(workspace=ws), effect) == "applied 2"  # no key: just runs


_DIE_AFTER_EFFECT = """
import os, sys
from pathlib import Path
from activities.tools import ToolContext, run_once
ws, target = Path(sys.argv[1]), Path(sys.argv[2])
def effect():
    with target.open("a") as fh:
        fh.write("effect\\n")
    os._exit(9)  # the worker dies after the effect, before the ledger entry
run_once(ToolContext(workspace=ws, idempotency_key="wf/c9"), effect, lambda: None)
"""


def test_run_once_asks_the_target_after_an_attempt_died_mid_effect(ws, tmp_path):
    target = tmp_path / "target.txt"
    died = subprocess.run(
        [sys.executable, "-c", _DIE_AFTER_EFFECT, str(ws), str(target)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert died.returncode == 9, died.stderr
    assert target.read_text() == "effect\n"
    ctx = ToolContext(workspace=ws, idempotency_key="wf/c9")
    runs: list[int] = []

    def effect() -> str:
        runs.append(1)
        return "applied again"

    def applied() -> str | None:
        return "applied earlier" if "effect" in target.read_text() else None

    assert run_once(ctx, effect, applied) == "applied earlier"
    assert runs == []  # the target knew the key: not applied twice
    assert run_once(ctx, effect, applied) == "applied earlier"  # now from the ledger
    # without `applied` the documented window stays: the effect runs again
    other = ToolContext(workspace=ws, idempotency_key="wf/c10")
    started = ledger_path(ws, "wf/c10").with_suffix(".started")
    started.parent.mkdir(parents=True, exist_ok=True)
    started.touch()
    assert run_once(other, effect) == "applied again" and runs == [1]


def test_old_ledger_files_are_pruned_and_fresh_ones_kept(ws, monkeypatch):
    from activities.tools import ledger

    ctx = ToolContext(workspace=ws, idempotency_key="wf/old")
    assert run_once(ctx, lambda: "done") == "done"
    folder = ledger_path(ws, "wf/old").parent
    old = sorted(folder.iterdir())
    assert old  # the entry and its lock
    ten_days_ago = time.time() - 10 * 86400
    for f in old:
        os.utime(f, (ten_days_ago, ten_days_ago))
    monkeypatch.setattr(ledger, "_pruned_at", {})  # as if the last pass was long ago
    assert run_once(ToolContext(workspace=ws, idempotency_key="wf/new"), lambda: "new") == "new"
    left = sorted(f.name for f in folder.iterdir())
    assert all(not (folder / f.name).exists() for f in old)
    new_entry = ledger_path(ws, "wf/new")
    assert left == sorted([new_entry.name, new_entry.with_suffix(".lock").name])
    # the old call would now apply again: that is what the retention bounds
    assert run_once(ctx, lambda: "again") == "again"


def test_ledger_retention_comes_from_the_environment(monkeypatch):
    from activities.tools import ledger

    monkeypatch.setenv("AGENT_TOOL_LEDGER_DAYS", "0.5")
    assert ledger.keep_seconds() == 43200
    monkeypatch.setenv("AGENT_TOOL_LEDGER_DAYS", "0")
    with pytest.raises(ValueError, match="AGENT_TOOL_LEDGER_DAYS"):
        ledger.keep_seconds()
    monkeypatch.delenv("AGENT_TOOL_LEDGER_DAYS")
    assert ledger.keep_seconds() == 7 * 86400
