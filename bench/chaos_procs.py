"""Processes of ``make chaos``: one dev server on a SQLite file and two workers, killed at will.

Every process is started here and recorded by pid; :meth:`Fleet.stop_all` ends each of them (and
any child it spawned) by that pid, whatever happened before -- the chaos driver calls it in a
``finally`` block, so Ctrl-C, a failure or the hard deadline leave nothing running.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from bench.infra import WorkerProc, spawn_worker
from workers.local.dev_server import find_dev_config, load_dev_config, start_dev_server


def kill_tree(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL ``pid`` and its descendants, then wait for them (no-op if already gone)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(procs, timeout=timeout)


def port_in_use(port: int) -> bool:
    """True when something on this machine listens on TCP ``port``."""
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Fleet:
    """The dev server and the workers of one chaos run.

    Args:
        workdir: folder for the config, the SQLite file and the logs.
        port: the server's gRPC port; ``ui_port`` its (unused, headless) UI port.
    """

    workdir: Path
    port: int = 17233
    ui_port: int = 18233
    server: Any = None  # subprocess.Popen of the dev server
    workers: list[WorkerProc] = field(default_factory=list)
    worker_args: dict[str, Any] = field(default_factory=dict)
    worker_env: list[dict[str, str]] = field(default_factory=list)
    """Environment added to worker ``index`` (two-host mode: each its own ``AGENT_HOME``)."""
    server_starts: int = 0
    worker_kills: int = 0
    server_kills: int = 0
    worker_exits: int = 0  # workers that exited by themselves (restarted by the supervisor)
    last_fault: float = 0.0  # time.monotonic() of the last kill

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @property
    def db_file(self) -> Path:
        """The server's SQLite file (kept across its restarts)."""
        return self.workdir / "chaos-temporal.db"

    def _config(self) -> Path:
        src = find_dev_config()
        cfg: dict[str, Any] = load_dev_config(src).model_dump(mode="json") if src else {}
        cfg.update(
            ip="127.0.0.1", port=self.port, ui_port=self.ui_port, db_filename=str(self.db_file),
            headless=True, log_level="warn", ui_codec_endpoint=None,
        )  # fmt: skip
        path = self.workdir / "temporal-dev.yml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    async def start_server(self) -> None:
        """Start (or restart, on the same SQLite file) the dev server; wait until it answers.

        Raises:
            RuntimeError: the port is taken by a process this fleet did not start.
        """
        if self.server is None and port_in_use(self.port):
            raise RuntimeError(f"port {self.port} is in use; pass --port to choose another")
        cfg = self._config()
        log = self.workdir / "temporal-server.log"
        self.server = await asyncio.to_thread(start_dev_server, cfg, log, None, True, 90.0)
        if self.server is None:
            raise RuntimeError(f"a server already answers at {self.address}")
        self.server_starts += 1

    async def kill_server(self, down_seconds: float = 1.0) -> None:
        """SIGKILL the dev server, wait ``down_seconds``, restart it on the same SQLite file."""
        if self.server is not None and self.server.poll() is None:
            await asyncio.to_thread(kill_tree, self.server.pid)
            self.server.wait()
        self.server_kills += 1
        self.last_fault = time.monotonic()
        await asyncio.sleep(down_seconds)
        await self.start_server()

    def spawn_worker(self, index: int) -> WorkerProc:
        """Start worker ``index`` (``python -m bench.worker_proc``, as ``agentctl worker``)."""
        env = self.worker_env[index] if index < len(self.worker_env) else None
        proc = spawn_worker("ours", self.address, workdir=self.workdir, name=f"worker{index}",
                            env=env, **self.worker_args)  # fmt: skip
        if index < len(self.workers):
            self.workers[index] = proc
        else:
            self.workers.append(proc)
        return proc

    async def kill_worker(self, index: int, down_seconds: float = 0.5) -> None:
        """SIGKILL worker ``index`` (a crash), then start a fresh one in its place."""
        await asyncio.to_thread(self.workers[index].kill)
        self.worker_kills += 1
        self.last_fault = time.monotonic()
        await asyncio.sleep(down_seconds)
        self.spawn_worker(index)

    def stop_all(self) -> None:
        """End every process this fleet started, by pid: workers first, then the server."""
        for w in self.workers:
            with contextlib.suppress(Exception):
                w.stop(timeout=5.0)
            if w.proc.poll() is None:  # still ours: not reaped, so the pid is not reused
                kill_tree(w.pid)
        if self.server is not None:
            with contextlib.suppress(Exception):
                self.server.terminate()
                self.server.wait(5.0)
            if self.server.poll() is None:
                kill_tree(self.server.pid)
            self.server = None
