"""What a sandboxed program can make the worker read and keep of its work folder: a folder that
grows without end, one file under hundreds of names (hard links), thousands of files, names that
are not UTF-8, and arguments the tools cannot pass on. Each is bounded or refused with a message
the model reads; none makes the worker fill its disk or fail with a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from activities.storage import LocalStorageDriver
from activities.tools.registry import ToolContext, ToolError
from activities.tools.sandbox_tools import MAX_KEPT_BYTES, configure, run_command, run_python

MIB = 1024 * 1024
WORK_BYTES = 256 * MIB  # Limits.work_bytes
WORK_ENTRIES = 1000  # Limits.work_entries


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    configure(tmp_path / "sandbox", store=LocalStorageDriver(tmp_path / "payloads"))
    ws = tmp_path / "ws"
    ws.mkdir()
    return ToolContext(workspace=ws, run_id="run-x", tenant_id="t", principal_id="p")


def py(ctx: ToolContext, code: str, **kw: object) -> dict:
    return json.loads(run_python(ctx, code, **kw))


def kept_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def test_one_file_under_many_names_is_not_kept_many_times(ctx: ToolContext, tmp_path: Path):
    code = """
import os
open("a", "wb").write(os.urandom(4 * 1024 * 1024))
for i in range(150):
    os.link("a", f"l{i:03}")  # 4 MiB on disk, 604 MiB to read and keep, name by name
"""
    r = py(ctx, code)  # stopped while linking, or done: either way 64 names of it are listed
    kept = MAX_KEPT_BYTES // (4 * MIB)  # and of those, 16 kept for later calls
    assert len(ctx.new_files) == len(r["files"]) == kept
    assert r["not_kept"]["files"] == WORK_BYTES // (4 * MIB) - kept
    assert kept_bytes(tmp_path / "payloads") <= MAX_KEPT_BYTES + MIB
    assert "file(s) not kept: the kept files may add up to 256 MiB" in r["stderr"], r


def test_a_work_folder_that_keeps_growing_is_stopped(ctx: ToolContext, tmp_path: Path):
    code = """
import sys
for i in range(64):  # 1 GiB in 16 MiB files (the largest one file may be)
    with open(f"f{i:02}", "wb") as f:
        for _ in range(16):
            f.write(b"x" * 1024 * 1024)
    print(i, flush=True)
"""
    r = py(ctx, code, timeout_s=60)
    assert r["exit_code"] == -9 and not r["timed_out"], r
    assert "[sandbox] the program was stopped: its work folder went over 256 MiB" in r["stderr"]
    assert int(r["stdout"].split()[-1]) < 63  # stopped while it ran, not after
    assert sum(f["size"] for f in r["files"]) <= WORK_BYTES
    assert kept_bytes(tmp_path / "payloads") <= WORK_BYTES + MIB


def test_thousands_of_files_are_listed_and_kept_up_to_the_limit(ctx: ToolContext):
    code = "for i in range(3000):\n    open(f'{i:04}', 'w').write(str(i))"
    r = py(ctx, code)
    assert len(r["files"]) <= WORK_ENTRIES and len(ctx.new_files) == len(r["files"])
    assert f"only the first {WORK_ENTRIES} entries" in r["stderr"], r["stderr"]


def test_a_name_that_is_not_utf8_is_left_out_not_a_crash(ctx: ToolContext):
    r = py(ctx, "open(b'bad\\xff', 'w').write('x'); open('good', 'w').write('y')")
    assert [f["name"] for f in r["files"]] == ["good"] and list(ctx.new_files) == ["good"]
    assert "1 file(s) not kept: their names are not UTF-8" in r["stderr"]


@pytest.mark.parametrize(
    "call",
    [
        lambda c: run_python(c, "print('\ud800')"),
        lambda c: run_python(c, "print(1)", files=["x" * 300]),
        lambda c: run_python(c, "print(1)", files=["a/" * 2100 + "b"]),
        lambda c: run_command(c, ["echo", "\ud800"]),
        lambda c: run_command(c, ["cat"], stdin="\ud800"),
    ],
    ids=["code", "long-name", "long-path", "argv", "stdin"],
)
def test_arguments_it_cannot_pass_on_are_a_tool_error(ctx: ToolContext, call):
    with pytest.raises(ToolError):
        call(ctx)
