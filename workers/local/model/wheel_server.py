"""llama.cpp's HTTP server from the ``xllamacpp`` wheel, started with ``llama-server``'s flags.

Source: ``xllamacpp==2026.10.11549`` on PyPI (MIT, https://github.com/xorbitsai/xllamacpp):
cp310-abi3 manylinux2014 wheels for x86_64 and aarch64 (also macOS and Windows), 33.8 MB, holding
llama.cpp's own server (``tools/server``: OpenAI API, jinja chat templates, tool calls, streaming,
per-slot prompt cache) inside one Python extension, ``xllamacpp.abi3.so``. Its x86_64 code uses
AVX, AVX2, FMA, F16C and BMI2 and nothing newer (``xllamacpp.get_system_info()`` lists them; no
AVX-512, AMX or VNNI), its aarch64 code plain armv8-a, so it runs on any x86-64 CPU with AVX2 and
on any arm64 CPU. It links the system's OpenMP runtime ``libgomp.so.1`` (Debian/Ubuntu package
``libgomp1``) and ``libstdc++.so.6`` (``libstdc++6``); it bundles neither.

The wheel has no ``llama-server`` executable, so this module is one: run as
``python -m workers.local.model.wheel_server --wheel-dir DIR --model FILE ...`` it puts ``DIR``
(the ``pip install --target`` folder holding ``xllamacpp``) first on ``sys.path``, maps the
``llama-server`` flags the model server passes (:data:`FLAGS`; ``--help`` lists them, so
:func:`workers.local.model.llama_binary.probe_flags` works) onto ``xllamacpp.CommonParams``,
starts ``xllamacpp.Server`` (it loads the model, then serves HTTP on ``--host:--port`` from its
own threads: ``/v1/models`` lists the ``--alias``, ``/v1/chat/completions`` takes ``tools`` and
``stream``) and stays up until SIGTERM or SIGINT. It leaves ``cache_prompt`` on (the default of
``CommonParams``: a slot keeps its prompt's KV cache, so a request repeating a prefix skips most of
its prompt processing) and llama.cpp's other server defaults as they are.

Exit status: 0 after SIGTERM/SIGINT, 1 when the server cannot start (missing or invalid model
file, missing system library, the wheel not found, llama.cpp refusing the settings; one line
``wheel-server: error: ...`` on standard error says which), 2 for a bad command line (argparse).
A CPU without the instructions the wheel needs kills it with SIGILL (exit -4) instead.

This module imports only the standard library at import time (``xllamacpp`` only in
:func:`load_xllamacpp`), so the model server can import its constants and the tests its mapping
without the wheel installed.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

WHEEL_PACKAGE = "xllamacpp"
WHEEL_VERSION = "2026.10.11549"
WHEEL_REQUIREMENT = f"{WHEEL_PACKAGE}=={WHEEL_VERSION}"
WHEEL_ARCHES = ("x86_64", "arm64")
"""Architectures with a Linux wheel (``manylinux2014_x86_64`` and ``_aarch64``), as
:func:`workers.local.model.llama_build.machine_arch` names them."""

WHEEL_X86_CPU_FLAGS = frozenset({"avx", "avx2", "fma", "f16c", "bmi2"})
"""``/proc/cpuinfo`` flags the x86_64 wheel's code needs (source: its ``get_system_info()``:
``SSE3 SSSE3 AVX AVX2 F16C FMA BMI2``; SSE3/SSSE3 come with every AVX2 CPU)."""

SYSTEM_LIBRARIES = {"libgomp.so.1": "libgomp1", "libstdc++.so.6": "libstdc++6"}
"""Shared libraries the extension links but does not bundle (``ldd``) -> their Debian package."""

LAUNCHER_MODULE = "workers.local.model.wheel_server"
"""``python -m`` name of this launcher; also the piece of its command line a pid file records."""

REASONING = {"on": 1, "off": 0, "auto": -1}
"""``--reasoning`` values -> ``CommonParams.enable_reasoning`` (llama-server's meaning)."""

EXIT_CANNOT_START = 1
_PREFIX = "wheel-server:"


class LaunchError(Exception):
    """The server cannot start; the message says why and what to do."""


# --------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------


def _on_off(value: str) -> bool:
    if value.lower() in ("on", "1", "true", "enabled"):
        return True
    if value.lower() in ("off", "0", "false", "disabled"):
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")


def build_parser() -> argparse.ArgumentParser:
    """The launcher's command line: ``llama-server``'s names for the flags it supports.

    ``--help`` lists every long option of :data:`FLAGS` (read by ``probe_flags``).
    """
    p = argparse.ArgumentParser(
        prog=f"python -m {LAUNCHER_MODULE}",
        description="llama.cpp's server from the xllamacpp wheel, with llama-server's flags "
        "(a subset). Stays up until SIGTERM or SIGINT.",
    )
    p.add_argument(
        "--wheel-dir",
        type=Path,
        default=None,
        help="folder holding xllamacpp (where pip installed it)",
    )
    p.add_argument("-m", "--model", type=Path, required=True, help="GGUF model file")
    p.add_argument("-a", "--alias", default=None, help="model name served in /v1/models")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (8080)")
    p.add_argument("-c", "--ctx-size", type=int, default=None, help="context size in tokens")
    p.add_argument("-t", "--threads", type=int, default=None, help="threads for generation")
    p.add_argument(
        "-tb", "--threads-batch", type=int, default=None, help="threads for prompt processing"
    )
    p.add_argument("-np", "--parallel", type=int, default=None, help="server slots")
    jinja = p.add_mutually_exclusive_group()
    jinja.add_argument(
        "--jinja", dest="jinja", action="store_true", default=None, help="jinja templates (on)"
    )
    jinja.add_argument("--no-jinja", dest="jinja", action="store_false", help="no jinja")
    p.add_argument("--chat-template-file", type=Path, default=None, help="jinja chat template file")
    p.add_argument("--temp", type=float, default=None, help="default sampling temperature")
    p.add_argument(
        "-rea", "--reasoning", choices=sorted(REASONING), default=None, help="on, off or auto"
    )
    p.add_argument(
        "--fit", type=_on_off, default=None, help="on|off: fit settings to device memory"
    )
    p.add_argument(
        "--no-webui", dest="webui", action="store_false", default=None, help="no Web UI at /"
    )
    return p


FLAGS = frozenset(
    opt
    for action in build_parser()._actions  # noqa: SLF001 - argparse has no public list
    for opt in action.option_strings
    if opt.startswith("--")
)
"""The long options the launcher takes (``--help`` included)."""


def settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``CommonParams`` attributes to set, by dotted path, for parsed flags.

    Only flags given are mapped; everything else keeps llama.cpp's default (``cache_prompt``
    on among them). ``--chat-template-file`` is read here (llama-server does the same: the
    template's text goes to ``chat_template``).

    Returns:
        e.g. ``{"model.path": "/m.gguf", "hostnames": ["127.0.0.1"], "port": 8110,
        "model_alias": {"qwen"}, "cpuparams.n_threads": 2, "sampling.temp": 0.2, ...}``.

    Raises:
        LaunchError: the template file cannot be read.
    """
    out: dict[str, Any] = {
        "model.path": str(args.model),
        "hostnames": [args.host],
        "port": args.port,
    }
    plain = {
        "alias": ("model_alias", lambda v: {v}),
        "ctx_size": ("n_ctx", int),
        "threads": ("cpuparams.n_threads", int),
        "threads_batch": ("cpuparams_batch.n_threads", int),
        "parallel": ("n_parallel", int),
        "jinja": ("use_jinja", bool),
        "temp": ("sampling.temp", float),
        "reasoning": ("enable_reasoning", REASONING.__getitem__),
        "fit": ("fit_params", bool),
        "webui": ("ui", bool),
    }
    for name, (attr, convert) in plain.items():
        value = getattr(args, name)
        if value is not None:
            out[attr] = convert(value)
    if args.chat_template_file is not None:
        try:
            out["chat_template"] = Path(args.chat_template_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise LaunchError(
                f"cannot read the chat template {args.chat_template_file}: {e}"
            ) from None
    return out


def apply_settings(params: Any, settings: Mapping[str, Any]) -> Any:
    """Set each dotted attribute of ``settings`` on ``params`` (a ``CommonParams``); returns it.

    Raises:
        LaunchError: an attribute this xllamacpp version does not have.
    """
    for dotted, value in settings.items():
        *parents, leaf = dotted.split(".")
        obj = params
        try:
            for name in parents:
                obj = getattr(obj, name)
            getattr(obj, leaf)  # a typo or a renamed field fails here, not silently
            setattr(obj, leaf, value)
        except AttributeError as e:
            raise LaunchError(f"xllamacpp's CommonParams has no {dotted} ({e})") from None
    return params


# --------------------------------------------------------------------------------------------
# Checks before loading
# --------------------------------------------------------------------------------------------

GGUF_MAGIC = b"GGUF"


def check_model_file(path: Path) -> None:
    """Refuse early, in words, what llama.cpp would refuse as "Failed to init server".

    Raises:
        LaunchError: ``path`` is missing, not a file, unreadable or not a GGUF file.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except FileNotFoundError:
        raise LaunchError(f"model file {path} does not exist") from None
    except IsADirectoryError:
        raise LaunchError(f"model file {path} is a directory") from None
    except OSError as e:
        raise LaunchError(f"model file {path} cannot be read: {e}") from None
    if head != GGUF_MAGIC:
        raise LaunchError(f"model file {path} is not a GGUF file (it starts with {head!r})")


def missing_system_libraries() -> list[str]:
    """The entries of :data:`SYSTEM_LIBRARIES` the dynamic loader cannot find (loads them).

    Linux only (the manylinux wheels link them); elsewhere the list is empty.
    """
    if not sys.platform.startswith("linux"):
        return []
    missing: list[str] = []
    for soname in SYSTEM_LIBRARIES:
        try:
            ctypes.CDLL(soname)
        except OSError:
            missing.append(soname)
    return missing


def system_library_hint(missing: Sequence[str]) -> str:
    """What to install for the missing libraries, e.g. ``sudo apt-get install libgomp1``."""
    packages = " ".join(SYSTEM_LIBRARIES.get(s, s) for s in missing)
    return (
        f"the xllamacpp wheel needs {', '.join(missing)} from the system: install it "
        f"(Debian/Ubuntu: sudo apt-get install {packages}; Fedora/RHEL: sudo dnf install libgomp "
        "libstdc++), or set AGENT_LLAMA_BUILD=source to build llama-server instead"
    )


def load_xllamacpp(wheel_dir: Path | None) -> ModuleType:
    """Import ``xllamacpp``, from ``wheel_dir`` first when given.

    Raises:
        LaunchError: not installed there, or a system library is missing (named, with the
            package to install).
    """
    if wheel_dir is not None:
        if not (Path(wheel_dir) / WHEEL_PACKAGE).is_dir():
            raise LaunchError(
                f"{WHEEL_PACKAGE} is not installed in {wheel_dir} "
                f"(pip install --no-deps --target {wheel_dir} {WHEEL_REQUIREMENT})"
            )
        sys.path.insert(0, str(wheel_dir))
    try:
        return importlib.import_module(WHEEL_PACKAGE)
    except ImportError as e:
        missing = missing_system_libraries()
        if missing:
            raise LaunchError(system_library_hint(missing)) from None
        raise LaunchError(f"cannot import {WHEEL_PACKAGE}: {e}") from None


# --------------------------------------------------------------------------------------------
# Serving
# --------------------------------------------------------------------------------------------


def start(args: argparse.Namespace) -> tuple[Any, str]:
    """Load the model and start the HTTP server; returns the server and its address.

    Raises:
        LaunchError: a check failed or llama.cpp could not start (its reasons are in the log
            lines it printed before).
    """
    check_model_file(args.model)
    xlc = load_xllamacpp(args.wheel_dir)
    params = apply_settings(xlc.CommonParams(), settings_from_args(args))
    if not params.cache_prompt:  # pragma: no cover - llama.cpp's default; guard a change of it
        params.cache_prompt = True
    try:
        server = xlc.Server(params)
    except RuntimeError as e:
        raise LaunchError(f"llama.cpp could not start with {args.model}: {e}") from None
    return server, str(server.listening_address)


def _wait_for_signal() -> int:
    """Block until SIGTERM or SIGINT; returns the signal's number."""
    got: list[int] = []
    done = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        got.append(signum)
        done.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, handler)
    while not done.wait(1.0):
        pass
    return got[0]


def _stop(holder: list[Any], grace: float = 15.0) -> None:
    """Drop the server (``holder`` has the only reference): its destructor stops HTTP.

    It also frees the model; if that takes longer than ``grace`` seconds the process exits (0).
    """
    timer = threading.Timer(grace, lambda: os._exit(0))
    timer.daemon = True
    timer.start()
    holder.clear()
    timer.cancel()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point (see the module docstring); returns the exit status."""
    args = build_parser().parse_args(argv)
    t0 = time.monotonic()
    try:
        server, address = start(args)
    except LaunchError as e:
        print(f"{_PREFIX} error: {e}", file=sys.stderr, flush=True)
        return EXIT_CANNOT_START
    holder = [server]
    del server
    print(
        f"{_PREFIX} {args.alias or args.model.name} listening at {address} "
        f"({time.monotonic() - t0:.1f}s, pid {os.getpid()})",
        file=sys.stderr,
        flush=True,
    )
    signum = _wait_for_signal()
    print(f"{_PREFIX} {signal.Signals(signum).name}: stopping", file=sys.stderr, flush=True)
    _stop(holder)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
