"""Background processes started by ``make``: recorded by pid file, stopped by ``make stop``.

Pid files live in ``$AGENT_STATE_DIR/pids/NAME.pid`` (default ``.agent-runtime/pids``), logs in
``$AGENT_STATE_DIR/logs/NAME.log``; the dev server's pid file is ``$AGENT_STATE_DIR/temporal-dev.pid``.
Recording, finding and stopping go through :mod:`workers.local.supervisor`: a pid is only signalled
while its command line still contains the name it was recorded with and it started when
recorded, so a reused pid is never killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from activities.private_files import private_dir
from workers.config import load_settings
from workers.local import supervisor


def state_dir() -> Path:
    """The local state folder (created)."""
    d = Path(load_settings().state_dir)
    (d / "pids").mkdir(parents=True, exist_ok=True)
    private_dir(d / "logs")
    return d


def pid_file(name: str) -> Path:
    """``pids/NAME.pid`` under the state folder."""
    return state_dir() / "pids" / f"{name}.pid"


def log_file(name: str) -> Path:
    """``logs/NAME.log`` under the state folder."""
    return state_dir() / "logs" / f"{name}.log"


def record(name: str, pid: int, marker: str) -> None:
    """Record a started process: its pid, a marker its command line contains, its start time."""
    supervisor.write_pid_file(pid_file(name), pid, marker)


def running(name: str) -> int | None:
    """The recorded pid of ``name`` if that process is still alive and still the same program."""
    return supervisor.running(pid_file(name))


def stop(name: str, timeout: float = 15.0) -> bool:
    """SIGTERM the recorded process, SIGKILL after ``timeout`` seconds; True if one was stopped."""
    return supervisor.stop(pid_file(name), timeout)


CODE_ROOTS = tuple(
    Path(__file__).resolve().parents[2] / p for p in ("workflows", "activities", "workers")
)
"""The runtime's code: a background process started before a ``.py`` file here changed runs old
code (a ``git pull`` or an edit since), so :func:`start_background` restarts it."""


def code_changed_at() -> float:
    """The newest modification time of a ``.py`` file under :data:`CODE_ROOTS` (epoch seconds)."""
    return max((f.stat().st_mtime for root in CODE_ROOTS for f in root.rglob("*.py")), default=0.0)


def start_background(name: str, module: str, ready_marker: str, wait_seconds: float = 30.0) -> int:
    """Start ``python -m MODULE`` detached (unless ``name`` runs already); returns its pid.

    Its output goes to ``logs/NAME.log``; it counts as started once ``ready_marker`` appears there.
    One that runs already is kept, unless the code changed after it was started
    (:func:`code_changed_at` after its pid file was written): it is stopped and started again.

    Raises:
        RuntimeError: the process exited or did not print the marker in time (with the log tail).
    """
    pid = running(name)
    if pid:
        rec = supervisor.read_pid_file(pid_file(name))
        if rec is None or code_changed_at() <= rec.written_at:
            print(f"{name} already running (pid {pid})")
            return pid
        print(f"{name} (pid {pid}) runs code older than this checkout: restarting it")
        stop(name)
    log = log_file(name)
    start = log.stat().st_size if log.exists() else 0
    proc = supervisor.spawn([sys.executable, "-m", *module.split()], log)
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
        "codec-server", "workers.payloads.codec_server", "codec_server_started", wait_seconds
    )
    return f"codec server running (pid {pid}): the Web UI shows payloads stored outside the history"


CONSOLE_URL = "http://127.0.0.1:8235/"
"""Where :func:`start_console` serves the run console (``agentctl serve``'s default)."""


def start_console(wait_seconds: float = 20.0) -> str:
    """Start ``agentctl serve`` (the run console) detached; returns a status line with its address.

    Raises:
        RuntimeError: it exited or did not start in time (with the log tail).
    """
    pid = start_background("console", "workers.cli serve", "run console:", wait_seconds)
    return f"run console (pid {pid}): {CONSOLE_URL}"


def stop_all() -> None:
    """Stop console, worker, codec server, model server and dev server, in that order."""
    from workers.local.dev_server import stop_dev_server
    from workers.local.model.process import stop_pid_file

    for name in ("console", "worker", "codec-server"):
        print(f"{name}: {'stopped' if stop(name) else 'not running'}")
    print(
        f"model-server: {'stopped' if stop_pid_file(pid_file('model-server')) else 'not running'}"
    )
    # `make demo` and `agentctl dev-server --background` record it here (AGENT_STATE_DIR).
    dev_pid = Path(load_settings().state_dir) / "temporal-dev.pid"
    print(f"dev-server: {'stopped' if stop_dev_server(dev_pid) else 'not running'}")


def main(argv: list[str] | None = None) -> int:
    """``python -m workers.local.procs start-worker | stop``."""
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
    print(
        "usage: python -m workers.local.procs start-worker|start-codec-server|stop", file=sys.stderr
    )
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
