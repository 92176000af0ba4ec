"""The sandbox of ``run_python``/``run_command`` under attack (issue #22): each attempt is refused
or contained, the worker survives, and nothing outside the sandbox changes."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from activities.sandbox import BubblewrapBackend, Limits
from activities.sandbox.bwrap import new_workdir
from activities.tools.registry import ToolContext
from activities.tools.sandbox_tools import configure, run_command, run_python

SB = BubblewrapBackend()


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ToolContext:
    configure(tmp_path / "sandbox")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.txt").write_text("one two three\nfour\n")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-4242")
    return ToolContext(workspace=ws, run_id="run-x", tenant_id="t", principal_id="p")


def py(ctx: ToolContext, code: str, **kw: object) -> dict:
    return json.loads(run_python(ctx, code, **kw))


@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    hits: list[int] = []

    def accept() -> None:
        try:
            while True:
                c, _ = s.accept()
                hits.append(1)
                c.close()
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    yield s.getsockname()[1], hits
    s.close()


def test_a_program_runs_and_its_result_is_data(ctx: ToolContext):
    r = py(
        ctx, "import sys; print(open('data.txt').read().split()); sys.exit(3)", files=["data.txt"]
    )
    assert r["exit_code"] == 3 and "'four'" in r["stdout"] and not r["timed_out"]
    r = py(ctx, "open('out.csv','w').write('a,b\\n')")
    assert [f["name"] for f in r["files"]] == ["out.csv"]
    again = py(ctx, "print(open('out.csv').read())", files=["out.csv"])  # the next call reads it
    assert again["stdout"] == "a,b\n\n"


def test_no_network_at_all(ctx: ToolContext, listener):
    port, hits = listener
    code = f"""
import socket
for what, f in [
    ("tcp", lambda: socket.create_connection(("127.0.0.1", {port}), 2)),
    ("dns", lambda: socket.getaddrinfo("example.com", 80)),
    ("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)),
    ("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
    ("unix", lambda: socket.socket(socket.AF_UNIX)),
]:
    try:
        f(); print(what, "OPEN")
    except Exception as e:
        print(what, "refused", type(e).__name__)
"""
    r = py(ctx, code)
    assert "OPEN" not in r["stdout"] and r["stdout"].count("refused") == 5, r
    assert hits == []


def test_host_files_secrets_and_other_calls_are_out_of_reach(ctx: ToolContext, tmp_path: Path):
    secret_dir = tmp_path / "sandbox" / "runs"
    code = f"""
import os
print("pid1", open("/proc/1/environ").read())  # the sandbox's own init: the clean environment
for p in ["/etc/shadow", "/etc/passwd", "/root/.bashrc", "{secret_dir}",
          "{Path.home()}", "{ctx.workspace}/data.txt", "/work/../etc"]:
    try:
        data = open(p).read() if not os.path.isdir(p) else os.listdir(p)
        print(p, "READ", str(data)[:40])
    except Exception as e:
        print(p, "refused", type(e).__name__)
print("env", sorted(os.environ))
"""
    r = py(ctx, code)
    assert "READ" not in r["stdout"], r["stdout"]
    assert "pid1 PATH=/usr/bin:/bin" in r["stdout"]
    assert "sk-test-SECRET" not in r["stdout"] and "OPENAI" not in r["stdout"]
    assert "env ['HOME', 'LANG', 'PATH', 'PWD', 'PYTHONDONTWRITEBYTECODE']" in r["stdout"]


def test_writes_outside_the_work_folder_and_link_tricks_change_nothing(
    ctx: ToolContext, tmp_path: Path
):
    victim = ctx.workspace / "data.txt"
    before = victim.read_text()
    code = f"""
import os
for what, f in [
    ("usr", lambda: open("/usr/evil", "w")),
    ("ws", lambda: open("{victim}", "w")),
    ("symlink", lambda: (os.symlink("{victim}", "l"), open("l", "w").write("owned"))),
    ("hardlink", lambda: os.link("/usr/bin/python3", "h")),
    ("chmod-suid", lambda: (open("s", "w").close(), os.chmod("s", 0o4755), os.stat("s").st_mode & 0o4000 and os.setuid(0))),
]:
    try:
        f(); print(what, "DONE")
    except Exception as e:
        print(what, "refused", type(e).__name__)
"""
    r = py(ctx, code)
    assert victim.read_text() == before
    assert not Path("/usr/evil").exists()
    for line in ("usr refused", "ws refused", "hardlink refused", "chmod-suid refused"):
        assert line in r["stdout"], r["stdout"]
    assert "symlink DONE" not in r["stdout"] or victim.read_text() == before


def test_privileged_calls_are_denied(ctx: ToolContext):
    code = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for name, args in [("ptrace", (0, 1, 0, 0)), ("mount", (b"none", b"/tmp", b"tmpfs", 0, None)),
                   ("unshare", (0x10000000,)), ("setns", (0, 0)), ("keyctl", (0, 0)),
                   ("bpf", (0, 0, 0))]:
    f = getattr(libc, name, None)
    if f is None:
        print(name, "absent"); continue
    rc = f(*args)
    print(name, "rc", rc, "errno", ctypes.get_errno())
"""
    r = py(ctx, code)
    for line in r["stdout"].splitlines():
        name, _, rc, *_ = line.split() + ["", ""]
        assert line.endswith("absent") or rc == "-1", line


def test_bombs_and_loops_are_contained_and_the_worker_survives(ctx: ToolContext):
    fork = py(ctx, "import os\nwhile True:\n    os.fork()", timeout_s=5)
    assert fork["timed_out"] or fork["exit_code"] != 0
    mem = py(ctx, "x = bytearray(4 * 1024**3)")
    assert mem["oom"] and mem["exit_code"] != 0
    loop = py(ctx, "while True: pass", timeout_s=1)
    assert loop["timed_out"] and loop["duration_ms"] < 10_000
    disk = py(ctx, "f=open('big','wb')\nwhile True: f.write(b'x'*1024*1024)", timeout_s=10)
    assert disk["exit_code"] != 0 and all(f["size"] <= 16 * 1024 * 1024 for f in disk["files"])
    kill = py(ctx, f"import os, signal\nos.kill({os.getpid()}, signal.SIGKILL)\nprint('alive?')")
    assert "alive?" in kill["stdout"] or kill["exit_code"] != 0
    assert py(ctx, "print(2 + 2)")["stdout"] == "4\n"  # we are still here


def test_run_command_runs_argv_with_stdin(ctx: ToolContext):
    r = json.loads(run_command(ctx, ["wc", "-w"], stdin="a b c d\n"))
    assert r["exit_code"] == 0 and r["stdout"].strip() == "4"
    r = json.loads(run_command(ctx, ["cat", "/etc/shadow"]))
    assert r["exit_code"] != 0


def test_output_is_capped_per_stream(ctx: ToolContext):
    r = py(ctx, "print('y' * 200_000)")
    assert r["truncated"] and len(r["stdout"]) == 64 * 1024


def test_the_backend_runs_in_a_fresh_private_folder():
    work = new_workdir()
    assert (work.stat().st_mode & 0o777) == 0o700 and not any(work.iterdir())
    r = SB.run(["python3", "-c", "print('ok')"], work, Limits(timeout_s=5))
    assert r.exit_code == 0 and r.stdout == "ok\n"
