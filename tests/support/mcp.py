"""Test helpers for MCP: spec entries for the test server, an HTTP server on a free port, journal."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def stdio_server(**extra: Any) -> dict[str, Any]:
    """An ``mcp_servers`` entry that starts tests/support/mcp_server.py over stdio."""
    return {
        "command": ["python", "-m", "tests.support.mcp_server", "stdio"],
        "cwd": str(REPO),
        "env": {"MCP_TEST_JOURNAL": "${MCP_TEST_JOURNAL}"},
        **extra,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_server(
    port: int | None = None, module: str = "tests.support.mcp_server"
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Start ``module`` (tests/support/mcp_server.py) over streamable HTTP; yields (url, process)."""
    port = port or free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "http", "--port", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}/mcp", proc
    finally:
        stop(proc)


def wait_for_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def journal(path: str | None = None) -> list[dict[str, Any]]:
    """The MCP test server's journal ($MCP_TEST_JOURNAL), one dict per call."""
    p = Path(path or os.environ["MCP_TEST_JOURNAL"])
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def gone(pid: int, timeout: float = 10.0) -> None:
    """Wait until process ``pid`` has exited (or is a zombie)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split(")")[-1].split()[0] in ("Z", "X"):
                    return
        except (FileNotFoundError, ProcessLookupError):  # gone before or while it was read
            return
        time.sleep(0.05)
    raise TimeoutError(f"process {pid} is still alive")
