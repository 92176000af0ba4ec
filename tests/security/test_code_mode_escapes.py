"""Code Mode under attack (issue #22): a script can reach nothing but the tools it is given.

Each script runs through the real ``code.step`` activity: Monty, inside bubblewrap as ``nobody``
with no network. Imports of OS modules, ``open``, the environment, attribute walks to
``__subclasses__``/``__globals__``, tools the spec does not list, positional tricks, and memory and
CPU bombs are refused or contained; the worker process survives.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import psutil
import pytest

from activities import code_mode
from activities.code_mode import CodeRunner
from activities.contracts import CodeStepInput, CodeStepOutput

NOW = "2026-11-26T10:00:00+00:00"


@pytest.fixture
def runner(tmp_path: Path) -> CodeRunner:
    return CodeRunner(tmp_path / "code-mode")


async def step(runner: CodeRunner, script: str, **kw: object) -> CodeStepOutput:
    inp = CodeStepInput(script=script, tools=["read_file"], now=NOW, **kw)  # pyright: ignore[reportArgumentType] - each test passes the fields it overrides
    return await runner.code_step(inp)


@pytest.mark.parametrize(
    ("script", "expect"),
    [
        ("import os\nos.listdir('/')", "Error"),
        ("import subprocess\nsubprocess.run(['id'])", "PermissionError"),
        ("import socket\nsocket.socket()", "PermissionError"),
        ("import ctypes", "PermissionError"),
        ("open('/etc/shadow').read()", "PermissionError"),
        ("from pathlib import Path\nPath('/etc/passwd').read_text()", "PermissionError"),
        ("import os\nos.environ['OPENAI_API_KEY']", "Error"),
        ("().__class__.__base__.__subclasses__()", "AttributeError"),
        ("(lambda: 0).__globals__", "AttributeError"),
        ("__import__('os')", "NameError"),
        ("eval(\"open('/etc/passwd').read()\")", "PermissionError"),
        ("exec('import os; os.system(\"id\")')", "Error"),
        ("await search_files(query='x')", "NameError"),  # a tool the spec does not list
        ("await read_file('/etc/passwd')", "TypeError"),  # positional: refused
    ],
)
async def test_escapes_are_refused_inside_the_script(runner: CodeRunner, script: str, expect: str):
    out = await step(runner, script)
    assert out.status == "error", out
    assert expect in (out.error or ""), out.error
    assert not out.calls


async def test_bombs_are_contained_and_the_worker_survives(runner: CodeRunner):
    out = await step(runner, "x = 'a' * 10\nwhile True:\n    x = x + x", max_memory_bytes=16 << 20)
    assert out.status == "error" and "MemoryError" in (out.error or ""), out.error
    out = await step(runner, "while True:\n    pass", step_seconds=0.5)
    assert out.status == "error" and "TimeoutError" in (out.error or ""), out.error
    out = await step(runner, "def f(n):\n    return f(n + 1)\nf(0)")
    assert out.status == "error" and "RecursionError" in (out.error or ""), out.error
    out = await step(runner, "sum(range(10))")  # still serving
    assert (out.status, out.value) == ("done", 45)


async def test_the_interpreter_runs_as_nobody_in_its_own_namespaces(runner: CodeRunner):
    """Seen from outside while a script spins: the Monty worker is uid 65534 under bwrap, in a
    network namespace other than ours."""
    task = asyncio.ensure_future(step(runner, "while True:\n    pass", step_seconds=3))
    found: list[psutil.Process] = []
    for _ in range(60):
        await asyncio.sleep(0.05)
        found = [
            p
            for p in psutil.process_iter(["name", "uids", "exe"])
            if p.info["name"] == "monty" and p.info["uids"] and p.info["uids"].real == 65534
        ]
        if found:
            break
    assert found, "no monty process running as nobody"
    proc = found[0]
    assert any(a.name() == "bwrap" for a in proc.parents())
    assert os_netns(proc.pid) != os_netns(os.getpid())
    out = await task
    assert out.status == "error" and "TimeoutError" in (out.error or "")


def os_netns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


async def test_the_clock_and_randomness_come_from_the_workflow(runner: CodeRunner):
    script = "import random\nfrom datetime import datetime\n[str(datetime.now()), random.random()]"
    a = await step(runner, script, seed=7)
    b = await step(runner, script, seed=7)
    assert a.status == "done" and a.value == b.value
    assert a.value[0].startswith("2026-11-26 10:00:00")


def test_the_launcher_gives_a_small_tmp_and_a_read_only_root(tmp_path, monkeypatch):
    """The launcher with a shell in Monty's place: what a program that escaped Monty could write.

    In-memory file systems count against no rlimit: ``/`` and ``/dev`` (bwrap's own) were
    writable without bound, ``/tmp`` too.
    """
    monkeypatch.setattr(code_mode, "_monty_binary", lambda: Path("/usr/bin/dash"))
    launcher = code_mode.sandboxed_worker(tmp_path / "launcher")

    def sh(script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(launcher), "-c", script], capture_output=True, text=True, timeout=60
        )

    assert sh("echo ok > /tmp/x && cat /tmp/x").stdout == "ok\n"
    assert sh("echo x > /x").returncode != 0
    assert sh("echo x > /dev/x").returncode != 0
    big = sh("head -c 33554432 /dev/zero > /tmp/big; echo $?; wc -c < /tmp/big")
    written, size = big.stdout.split()
    assert written != "0" and int(size) <= code_mode.TMP_BYTES
