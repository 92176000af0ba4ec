"""Background processes started by ``make``: recorded by pid file, stopped by ``make stop``.

Pid files live in ``$AGENT_STATE_DIR/pids/NAME.pid`` (default ``.agent-runtime/pids``), logs in
``$AGENT_STATE_DIR/logs/NAME.log``. A pid is only signalled while its command line still
contains the name it was recorded with, so a reused pid is never killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from workers.config import load_settings


def state_dir() -> Path:
    """The local state folder (created)."""
    d = Path(load_settings().state_dir)
    (d / "pids").mkdir(parents=True, exist_ok=True)
    (d / "logs").mkdir(parents=True, exist_ok=True)
    return d


def pid_file(name: str) -> Path:
    """``pids/NAME.pid`` under the state folder."""
    return state_dir() / "pids" / f"{name}.pid"


def log_file(name: str) -> Path:
    """``logs/NAME.log`` under the state folder."""
    return state_dir() / "logs" / f"{name}.log"


def record(name: str, pid: int, marker: str) -> None:
    """Record a started process: its pid and a marker its command line contains."""
    pid_file(name).write_text(f"{pid}\n{marker}\n")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def running(name: str) -> int | None:
    """The recorded pid of ``name`` if that process is still alive and still the same program."""
    f = pid_file(name)
    if not f.exists():
        return None
    lines = f.read_text().split("\n")
    try:
        pid = int(lines[0])
    except ValueError:
        return None
    marker = lines[1] if len(lines) > 1 else ""
    cmd = _cmdline(pid)
    if cmd and marker in cmd:
        return pid
    return None


def stop(name: str, timeout: float = 15.0) -> bool:
    """SIGTERM the recorded process, SIGKILL after ``timeout`` seconds; True if one was stopped."""
    pid = running(name)
    pid_file(name).unlink(missing_ok=True)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _cmdline(pid):
            return True
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    return True


def start_worker(wait_seconds: float = 30.0) -> int:
    """Start ``agentctl worker`` detached (unless one runs); returns its pid.

    Raises:
        RuntimeError: the worker exited or did not report ``worker_started`` in time (log tail).
    """
    pid = running("worker")
    if pid:
        print(f"worker already running (pid {pid})")
        return pid
    log = log_file("worker")
    with log.open("ab") as fh:
        start = log.stat().st_size
        proc = subprocess.Popen(
            [sys.executable, "-m", "workers.cli", "worker"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    record("worker", proc.pid, "workers.cli")
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        with log.open("rb") as fh:
            fh.seek(start)
            text = fh.read().decode(errors="replace")
        if "worker_started" in text:
            print(f"worker started (pid {proc.pid}), log: {log}")
            return proc.pid
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited with {proc.returncode}:\n{text[-2000:]}")
        time.sleep(0.2)
    raise RuntimeError(f"the worker did not start in {wait_seconds:.0f} s; see {log}")


def stop_all() -> None:
    """Stop worker, codec server, model server and dev server, in that order."""
    from workers.dev_server import stop_dev_server
    from workers.model_server import stop_pid_file

    for name in ("worker", "codec-server"):
        print(f"{name}: {'stopped' if stop(name) else 'not running'}")
    print(f"model-server: {'stopped' if stop_pid_file(pid_file('model-server')) else 'not running'}")
    dev_pid = Path(load_settings().state_dir) / "temporal-dev.pid"
    print(f"dev-server: {'stopped' if stop_dev_server(dev_pid) else 'not running'}")


def main(argv: list[str] | None = None) -> int:
    """``python -m workers.procs start-worker | stop``."""
    args = argv if argv is not None else sys.argv[1:]
    if args == ["start-worker"]:
        try:
            start_worker()
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    if args == ["stop"]:
        stop_all()
        return 0
    print("usage: python -m workers.procs start-worker|stop", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
