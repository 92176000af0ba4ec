"""Processes of the local model server: where it listens, when it is ready, how it stops.

Importing this module has no side effects.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from workers.local import supervisor
from workers.local.model.files import MODEL_NAME, ModelServerError
from workers.local.model.llama_binary import BinaryCannotRun, describe_exit

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8110
DEFAULT_BASE_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}/v1"
DEFAULT_READY_TIMEOUT = 120.0


def host_port_from_env(
    base_url: str | None = None,
    *,
    default_host: str = DEFAULT_HOST,
    default_port: int = DEFAULT_PORT,
) -> tuple[str, int]:
    """Host and port to bind, from ``OPENAI_BASE_URL`` when it points at this machine.

    A base URL on another host (OpenAI, a remote vLLM, ...) says nothing about where *our* server
    should listen, so the defaults are used then.
    """
    url = base_url if base_url is not None else os.environ.get("OPENAI_BASE_URL", "")
    if not url:
        return default_host, default_port
    parsed = urllib.parse.urlparse(url)
    if parsed.hostname in ("127.0.0.1", "localhost", "::1"):
        host = "127.0.0.1" if parsed.hostname == "localhost" else parsed.hostname
        try:
            port = parsed.port
        except ValueError:
            port = None
        if port is None:
            port = 443 if parsed.scheme == "https" else 80
        return host, port
    return default_host, default_port


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def is_ready(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, timeout: float = 2.0) -> bool:
    """True when ``GET /v1/models`` answers 200 with our model listed (the model is loaded)."""
    url = f"http://{_url_host(host)}:{port}/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
            if resp.status != 200:
                return False
            body = json.loads(resp.read().decode("utf-8") or "{}")
    except (urllib.error.URLError, OSError, ValueError):
        return False
    names = {m.get("id") for m in body.get("data", []) if isinstance(m, dict)}
    names |= {m.get("name") for m in body.get("models", []) if isinstance(m, dict)}
    return not names or MODEL_NAME in names or any(MODEL_NAME in str(n) for n in names)


def wait_until_ready(
    proc: subprocess.Popen | None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    timeout: float = DEFAULT_READY_TIMEOUT,
    log_path: Path | None = None,
) -> float:
    """Poll until the server answers; returns the seconds waited.

    Raises:
        BinaryCannotRun: the process exited first (the log's tail is included).
        ModelServerError: ``timeout`` passed (the log's tail is included).
    """
    start = time.monotonic()
    while True:
        if proc is not None and proc.poll() is not None:
            code = proc.returncode
            how = f"exited with {code}" if code >= 0 else f"was {describe_exit(code)}"
            raise BinaryCannotRun(
                f"llama-server {how} before it was ready" + _log_tail(log_path), code
            )
        if is_ready(host, port):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise ModelServerError(
                f"llama-server not ready on {host}:{port} after {timeout:.0f}s"
                + _log_tail(log_path)
            )
        time.sleep(0.25)


def _log_tail(log_path: Path | None, lines: int = 30) -> str:
    return supervisor.log_tail(log_path, lines)


def _port_in_use(host: str, port: int) -> bool:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


LLAMA_SERVER_MARKER = "llama-server"
"""What a model server's command line contains when its pid file names no marker (the
``llama-server`` executables; the wheel's launcher records its module name instead)."""


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Terminate a server we started (SIGTERM, then SIGKILL)."""
    supervisor.terminate(proc, timeout)


def stop_pid_file(pid_file: Path, timeout: float = 10.0) -> bool:
    """Stop the server recorded in ``pid_file`` (by :func:`write_pid_file`); True if stopped.

    Only a live process whose command line contains the pid file's marker (else
    ``llama-server``) is signalled.
    """
    return supervisor.stop(pid_file, timeout, LLAMA_SERVER_MARKER)


def write_pid_file(pid_file: Path, pid: int, marker: str = "") -> None:
    """Record the model server's pid in ``pid_file``, and ``marker`` when given.

    ``marker`` is a piece of its command line (e.g. ``workers.local.model.wheel_server``) that
    stops check before they signal the pid.
    """
    supervisor.write_pid_file(pid_file, pid, marker)
