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
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
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


def start_background(name: str, module: str, ready_marker: str, wait_seconds: float = 30.0) -> int:
    """Start ``python -m MODULE`` detached (unless ``name`` runs already); returns its pid.

    Its output goes to ``logs/NAME.log``; it counts as started once ``ready_marker`` appears there.

    Raises:
        RuntimeError: the process exited or did not print the marker in time (with the log tail).
    """
    pid = running(name)
    if pid:
        print(f"{name} already running (pid {pid})")
        return pid
    log = log_file(name)
    with log.open("ab") as fh:
        start = log.stat().st_size
        proc = subprocess.Popen(
            [sys.executable, "-m", *module.split()],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    record(name, proc.pid, module.split()[0])
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        with log.open("rb") as fh:
            fh.seek(start)
            text = fh.read().decode(errors="replace")
        if ready_marker in text:
            print(f"{name} started (pid {proc.pid}), log: {log}")
            return proc.pid
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}:\n{text[-2000:]}")
        time.sleep(0.2)
    raise RuntimeError(f"{name} did not start in {wait_seconds:.0f} s; see {log}")


def start_worker(wait_seconds: float = 30.0) -> int:
    """Start ``agentctl worker`` detached; returns its pid (see :func:`start_background`)."""
    return start_background("worker", "workers.cli worker", "worker_started", wait_seconds)


def start_codec_server(wait_seconds: float = 15.0) -> str:
    """Start the codec server for the Web UI detached; returns a status line."""
    pid = start_background(
        "codec-server", "workers.codec_server", "codec_server_started", wait_seconds
    )
    return f"codec server running (pid {pid}): the Web UI shows payloads stored outside the history"


def stop_all() -> None:
    """Stop worker, codec server, model server and dev server, in that order."""
    from workers.dev_server import stop_dev_server
    from workers.model_process import stop_pid_file

    for name in ("worker", "codec-server"):
        print(f"{name}: {'stopped' if stop(name) else 'not running'}")
    print(
        f"model-server: {'stopped' if stop_pid_file(pid_file('model-server')) else 'not running'}"
    )
    # `make demo` and `agentctl dev-server --background` record it here (AGENT_STATE_DIR).
    dev_pid = Path(load_settings().state_dir) / "temporal-dev.pid"
    print(f"dev-server: {'stopped' if stop_dev_server(dev_pid) else 'not running'}")


def main(argv: list[str] | None = None) -> int:
    """``python -m workers.procs start-worker | stop``."""
    args = argv if argv is not None else sys.argv[1:]
    if args in (["start-worker"], ["start-codec-server"]):
        try:
            start_worker() if args == ["start-worker"] else print(start_codec_server())
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        return 0
    if args == ["stop"]:
        stop_all()
        return 0
    print("usage: python -m workers.procs start-worker|start-codec-server|stop", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
