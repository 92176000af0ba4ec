"""Memory and disk a sandboxed program could take from the worker's machine beyond its limits,
tried where the cgroup limits do not hold (only the rlimits): in-memory file systems (``/``,
``/dev``, ``/dev/shm``, ``/tmp``), ``memfd_create`` and System V shared memory, and a work folder
that grows without end or is multiplied by hard links when the worker keeps its files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import activities.sandbox.bwrap as bw
from activities.tools.registry import ToolContext
from activities.tools.sandbox_tools import configure, run_python

MIB = 1024 * 1024


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    configure(tmp_path / "sandbox")
    ws = tmp_path / "ws"
    ws.mkdir()
    return ToolContext(workspace=ws, run_id="run-x", tenant_id="t", principal_id="p")


@pytest.fixture
def no_cgroups(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine whose cgroup tree is not writable: only the rlimits hold."""
    monkeypatch.setattr(bw, "CGROUP_ROOT", Path("/nonexistent-cgroup-root"))


def py(ctx: ToolContext, code: str, **kw: object) -> dict:
    return json.loads(run_python(ctx, code, **kw))


FILL = """
import os
def fill(where, mib):
    n = 0
    try:
        os.makedirs(where, exist_ok=True)
        for i in range(mib // 16):
            with open(f"{where}/f{i}", "wb") as f:
                for _ in range(16):
                    f.write(b"x" * 1024 * 1024)
            n += 16
    except OSError as e:
        print(where, "stopped", e.strerror, "after MiB", n)
        return
    print(where, "FILLED MiB", n)
for where in ["/big", "/dev/big", "/dev/shm", "/tmp"]:
    fill(where, 576)  # more than the 512 MiB the program may use
"""


def test_in_memory_file_systems_are_small_or_read_only(ctx: ToolContext, no_cgroups: None):
    r = py(ctx, FILL, timeout_s=60)
    out = r["stdout"]
    assert "FILLED" not in out, out
    assert "/big stopped Read-only file system" in out
    assert "/dev/big stopped Read-only file system" in out
    assert "/dev/shm stopped No space left on device after MiB 64" in out
    assert "/tmp stopped No space left on device after MiB 64" in out
    assert py(ctx, "open('/tmp/a', 'w').write('ok'); print(open('/tmp/a').read())")["stdout"] == (
        "ok\n"
    )


def test_memfd_and_system_v_shared_memory_are_refused(ctx: ToolContext, no_cgroups: None):
    code = """
import ctypes, os
try:
    os.memfd_create("x"); print("memfd OPEN")
except OSError as e:
    print("memfd refused", e.strerror)
libc = ctypes.CDLL(None, use_errno=True)
sid = libc.shmget(0, 64 * 1024 * 1024, 0o1000 | 0o600)
print("shmget", "OPEN" if sid >= 0 else "refused", os.strerror(ctypes.get_errno()))
cb = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(lambda x: x + 1)
print("ctypes callback", cb(41))  # libffi's trampolines still work without memfd
"""
    r = py(ctx, code)
    assert "memfd refused Operation not permitted" in r["stdout"], r
    assert "shmget refused Operation not permitted" in r["stdout"], r
    assert "ctypes callback 42" in r["stdout"], r
