"""Build ``llama-server`` from source for this CPU, once per machine.

Used by :mod:`workers.local.model.llama_binary` when the ``xllamacpp`` wheel cannot run here
(x86-64 without AVX2, architectures other than x86-64 and arm64, or its server crashed on this
CPU) or when ``AGENT_LLAMA_BUILD=source`` asks for it.

Source: the ``llama-cpp-python==0.3.36`` sdist on PyPI (MIT), which vendors the whole llama.cpp tree,
``tools/server`` included, under ``vendor/llama.cpp``. We only compile the ``llama-server`` target of
that tree with CMake (``GGML_NATIVE=ON``: tuned for the CPU it is built on, so the result only runs
there), statically linked (one file to cache), without network features (no curl, no OpenSSL, no
prebuilt Web UI download). Measured on 2 cores: about 10 minutes (17.8 min CPU) on an idle AMD
Zen 3; 16-17 minutes on a 2-core Xeon shared with other work (2026-11-23).

Cache layout, under the model cache folder (``AGENT_MODEL_CACHE``, default
``~/.cache/agent-runtime/model``)::

    llama-server/<key>/llama-server   the binary
    llama-server/<key>/build.json     how and when it was built
    llama-server/<key>/build.log      the compiler's output
    llama-server/.build-<key>/        scratch (sources, objects) while building
    build-tools/                      cmake and ninja from PyPI, if the machine has none

``<key>`` is ``<source version>-r<recipe>-<arch>-<hash of the CPU's feature flags>``: it changes
when the CPU, the source version or our build options change, so a cache folder shared between
machines never hands one a binary built for another. The scratch folder is removed once the binary
is in place; a failed or interrupted build keeps it, so the next try compiles only what is missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from workers.local.model.files import ModelServerError, pip_install, run_pip

SOURCE_PACKAGE = "llama-cpp-python"
SOURCE_VERSION = "0.3.36"
SOURCE_REQUIREMENT = f"{SOURCE_PACKAGE}=={SOURCE_VERSION}"
SOURCE_SUBDIR = "vendor/llama.cpp"
"""Where the sdist keeps the llama.cpp tree (relative to its top folder)."""

CMAKE_OPTIONS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
)
"""CMake options of the build; the last two keep it offline (no Web UI assets downloaded)."""

BUILD_RECIPE = 2
"""Bumped whenever the build's options or patches change, so older builds are not reused."""

NO_AMX_FLAGS = ("-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16")
"""Compiler flags that keep AMX out of a ``-march=native`` build (see :func:`patch_source`)."""

BUILD_TARGET = "llama-server"
BUILD_TOOL_PACKAGES = ("cmake", "ninja")
"""PyPI packages that supply the build tools when the machine has none."""

_SKIPPED_MEMBERS = ("models/ggml-vocab", "docs/")
"""Parts of the vendored tree the build does not need (75 MB of test vocabularies, 38 MB docs)."""

ProgressFn = Callable[[str], None]


# --------------------------------------------------------------------------------------------
# The CPU
# --------------------------------------------------------------------------------------------


def machine_arch() -> str:
    """Normalised CPU architecture: ``x86_64``, ``arm64``, or what :func:`platform.machine` says."""
    arch = platform.machine().lower()
    return {"amd64": "x86_64", "aarch64": "arm64"}.get(arch, arch)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """Feature flags of the first CPU (``flags`` on x86, ``Features`` on arm), empty if unknown."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in ("flags", "features"):
            return frozenset(value.split())
    return frozenset()


def cpu_key(arch: str | None = None, flags: frozenset[str] | None = None) -> str:
    """``<version>-r<recipe>-<arch>-<12 hex of sha256 over the sorted flags>``: the cache key."""
    arch = arch or machine_arch()
    flags = cpu_flags() if flags is None else flags
    digest = hashlib.sha256(" ".join(sorted(flags)).encode()).hexdigest()[:12]
    return f"{SOURCE_VERSION}-r{BUILD_RECIPE}-{arch}-{digest}"


def build_dir(cache_dir: Path, key: str | None = None) -> Path:
    """``<cache>/llama-server/<key>``: where this CPU's build lives."""
    return Path(cache_dir) / "llama-server" / (key or cpu_key())


def built_binary(cache_dir: Path, key: str | None = None) -> Path | None:
    """The cached build for this CPU and source version, if there is one."""
    folder = build_dir(cache_dir, key)
    binary = folder / BUILD_TARGET
    if binary.is_file() and (folder / "build.json").is_file() and os.access(binary, os.X_OK):
        return binary
    return None


def build_jobs(requested: int | None = None) -> int:
    """Parallel compile jobs: ``requested`` or the cores this process may use."""
    if requested and requested > 0:
        return requested
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


# --------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------


def find_compiler() -> str | None:
    """A C++ compiler: ``$CXX``, else ``c++``, ``g++`` or ``clang++`` on PATH."""
    cxx = os.environ.get("CXX")
    if cxx and shutil.which(cxx):
        return shutil.which(cxx)
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _cmake_ok(cmake: str) -> bool:
    """True when ``cmake --version`` says 3.14 or newer (llama.cpp's minimum)."""
    try:
        out = subprocess.run(  # noqa: S603
            [cmake, "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    m = re.search(r"(\d+)\.(\d+)", out)
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (3, 14)


def _pypi_tool(tools_dir: Path, package: str) -> Path | None:
    """The real executable a ``cmake``/``ninja`` wheel unpacked into ``tools_dir`` ships.

    The cmake wheel keeps it in ``cmake/data/bin/cmake`` (its ``bin/cmake`` is a Python shim);
    the ninja wheel ships the binary itself as a script, which ``--target`` puts in ``bin/``.
    """
    for cand in (tools_dir / package / "data" / "bin" / package, tools_dir / "bin" / package):
        if cand.is_file() and _is_binary_executable(cand):
            return cand
    return None


def _is_binary_executable(path: Path) -> bool:
    """True for a native executable (ELF or Mach-O), False for a script such as a Python shim."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return False
    return head == b"\x7fELF" or head in (b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe")


def ensure_build_tools(cache_dir: Path, progress: ProgressFn) -> tuple[str, str | None]:
    """``(cmake, ninja or None)``: from PATH, else installed from PyPI into ``<cache>/build-tools``.

    Raises:
        ModelServerError: pip could not install cmake.
    """
    tools_dir = Path(cache_dir) / "build-tools"
    cmake = shutil.which("cmake")
    ninja = shutil.which("ninja")
    if cmake and not _cmake_ok(cmake):
        cmake = None
    if not cmake:
        cmake = str(_pypi_tool(tools_dir, "cmake") or "")
    if not ninja:
        ninja = str(_pypi_tool(tools_dir, "ninja") or "") or None
    missing = [p for p, have in (("cmake", cmake), ("ninja", ninja)) if not have]
    if missing:
        progress(f"installing {', '.join(missing)} from PyPI into {tools_dir}")
        pip_install(tools_dir, list(missing))
        cmake = cmake or str(_pypi_tool(tools_dir, "cmake") or "")
        ninja = ninja or str(_pypi_tool(tools_dir, "ninja") or "") or None
    if not cmake:
        raise ModelServerError(f"cmake not found on PATH nor in {tools_dir} after pip install")
    return cmake, ninja


# --------------------------------------------------------------------------------------------
# Source
# --------------------------------------------------------------------------------------------


def download_source(dest: Path) -> Path:
    """``pip download`` the pinned sdist into ``dest``; returns the ``.tar.gz`` path.

    Raises:
        ModelServerError: pip failed (the message has its output's tail).
    """
    dest.mkdir(parents=True, exist_ok=True)
    status, tail = run_pip(
        "download", "--no-binary", ":all:", "--no-deps", "-d", str(dest), SOURCE_REQUIREMENT
    )
    found = sorted(dest.glob("llama_cpp_python-*.tar.gz")) + sorted(
        dest.glob("llama-cpp-python-*.tar.gz")
    )
    if status != 0 or not found:
        raise ModelServerError(f"pip download {SOURCE_REQUIREMENT} failed ({status})\n{tail}")
    return found[0]


def extract_source(archive: Path, dest: Path) -> Path:
    """Unpack the vendored llama.cpp tree of the sdist into ``dest``; returns its root.

    Only members under ``<top>/vendor/llama.cpp/`` are taken (minus test vocabularies and docs),
    with the ``data`` extraction filter (no absolute paths, no links out of ``dest``).
    """
    prefix_re = re.compile(r"^[^/]+/" + re.escape(SOURCE_SUBDIR) + "/")
    with tarfile.open(archive, "r:gz") as tar:
        members = []
        for m in tar.getmembers():
            rest = prefix_re.sub("", m.name, count=1)
            if rest == m.name or rest.startswith(_SKIPPED_MEMBERS):
                continue
            members.append(m)
        if not members:
            raise ModelServerError(f"{archive.name} has no {SOURCE_SUBDIR} folder")
        top = members[0].name.split("/", 1)[0]
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, members=members, filter="data")  # noqa: S202 - filtered
        else:  # Python < 3.11.4: refuse unsafe names ourselves
            for m in members:
                if m.name.startswith("/") or ".." in Path(m.name).parts or m.issym() or m.islnk():
                    raise ModelServerError(f"unsafe member {m.name!r} in {archive.name}")
            tar.extractall(dest, members=members)  # noqa: S202 - checked above
    return dest / top / SOURCE_SUBDIR


def patch_source(
    src: Path, progress: ProgressFn, flags: frozenset[str] | None = None, arch: str | None = None
) -> list[str]:
    """Keep AMX out of a native build on a CPU that has it; returns what was changed.

    With ``GGML_NATIVE=ON`` ggml compiles its CPU backend with ``-march=native``, which on a CPU
    with AMX (Intel Sapphire Rapids and later) turns on ggml's AMX matrix kernels. Built from this
    source (0.3.36) they crashed the server with SIGSEGV in ``ggml_backend_amx_mul_mat`` while
    it warmed up (measured 2026-11-23 on a 2-core Xeon VM with ``amx_tile/int8/bf16``). So on such
    CPUs ``-mno-amx-tile -mno-amx-int8 -mno-amx-bf16`` follow ``-march=native`` in
    ``ggml/src/ggml-cpu/CMakeLists.txt`` (after it, since the last flag wins); every other
    native feature (AVX-512, VNNI, ...) stays. Elsewhere nothing is changed.
    """
    arch = arch or machine_arch()
    flags = cpu_flags() if flags is None else flags
    if arch != "x86_64" or not flags & {"amx_tile", "amx_int8", "amx_bf16"}:
        return []
    cml = src / "ggml" / "src" / "ggml-cpu" / "CMakeLists.txt"
    native = "list(APPEND ARCH_FLAGS -march=native)"
    patched = f"list(APPEND ARCH_FLAGS -march=native {' '.join(NO_AMX_FLAGS)})"
    record = [f"{cml.relative_to(src)}: -march=native {' '.join(NO_AMX_FLAGS)}"]
    text = cml.read_text(encoding="utf-8") if cml.is_file() else ""
    if patched in text:  # patched by an earlier try
        return record
    if native not in text:
        progress(f"warning: {native!r} not found in {cml}; AMX stays on in this build")
        return []
    cml.write_text(text.replace(native, patched), encoding="utf-8")
    progress("this CPU has AMX: building without ggml's AMX kernels (they crash in this version)")
    return record


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------

_NINJA_RE = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_RE = re.compile(r"^\[\s*(\d+)%\]")


def progress_percent(line: str) -> int | None:
    """Percent done from one build output line (ninja ``[12/340]`` or make ``[ 35%]``), or None."""
    m = _NINJA_RE.match(line)
    if m and int(m.group(2)):
        return int(100 * int(m.group(1)) / int(m.group(2)))
    m = _MAKE_RE.match(line)
    return int(m.group(1)) if m else None


def _run_logged(
    cmd: list[str],
    log: TextIO,
    progress: ProgressFn | None = None,
    step: int = 5,
    quiet_seconds: float = 60.0,
) -> int:
    """Run ``cmd``, copy its output to ``log``, report progress; returns the exit code.

    A line goes to ``progress`` every ``step`` percent, and a "still building" line when
    ``quiet_seconds`` pass without one (some files take minutes to compile on 2 cores).
    """
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(  # noqa: S603
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    t0 = time.monotonic()
    seen = {"pct": -step, "at": t0}
    done = threading.Event()

    def report(text: str) -> None:
        seen["at"] = time.monotonic()
        progress(f"building llama-server: {text}")  # pyright: ignore[reportOptionalCall] - checked not None before the thread starts

    def heartbeat() -> None:
        while not done.wait(5.0):
            if time.monotonic() - seen["at"] >= quiet_seconds:
                report(
                    f"{max(seen['pct'], 0):3d}%  still compiling, {time.monotonic() - t0:.0f}s so far"
                )

    if progress:
        threading.Thread(target=heartbeat, daemon=True).start()
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            log.write(line)
            pct = progress_percent(line) if progress else None
            if pct is not None and pct >= seen["pct"] + step:
                seen["pct"] = pct - pct % step
                report(f"{pct:3d}%  {line.strip()[:90]}")
        return proc.wait()
    finally:
        done.set()


def _log_tail(path: Path, lines: int = 25) -> str:
    with contextlib.suppress(OSError):
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])
    return ""


@contextlib.contextmanager
def _build_lock(folder: Path):
    """An exclusive lock on ``folder/.lock`` so two starts never build at once (POSIX only)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as fh:
        try:
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - Windows: no lock
            pass
        yield


def build_llama_server(
    cache_dir: Path, progress: ProgressFn, *, jobs: int | None = None, key: str | None = None
) -> Path:
    """Build ``llama-server`` for this CPU into the cache (unless built already); returns it.

    Steps: check for a C++ compiler; get cmake (and ninja) from PATH or PyPI; ``pip download`` the
    pinned sdist; unpack its llama.cpp tree; configure with :data:`CMAKE_OPTIONS`; build the
    ``llama-server`` target with ``jobs`` parallel jobs, reporting percent lines through
    ``progress``. The full output is kept in ``<build dir>/build.log``.

    Raises:
        ModelServerError: no compiler, a download or a build step failed (with the log's tail).
    """
    folder = build_dir(cache_dir, key)
    with _build_lock(folder.parent):
        done = built_binary(cache_dir, key)
        if done:
            return done
        compiler = find_compiler()
        if not compiler:
            raise ModelServerError(
                "building llama-server needs a C++ compiler and none was found (set CXX, or install "
                "one: `apt-get install g++`, `dnf install gcc-c++`, `xcode-select --install`); or "
                "point AGENT_LLAMA_SERVER at an existing llama-server"
            )
        cmake, ninja = ensure_build_tools(cache_dir, progress)
        folder.mkdir(parents=True, exist_ok=True)
        log_path = folder / "build.log"
        t0 = time.monotonic()
        # Scratch survives a failed or interrupted build, so the next try compiles only what is
        # missing; it is removed once the binary is in place.
        work = folder.parent / f".build-{folder.name}"
        src = _prepared_source(work, progress)
        patches = patch_source(src, progress)
        binary = _compile(src, work / "build", cmake, ninja, build_jobs(jobs), log_path, progress)
        shutil.copy2(binary, folder / BUILD_TARGET)
        shutil.rmtree(work, ignore_errors=True)
        (folder / BUILD_TARGET).chmod(0o755)
        info = {
            "source": SOURCE_REQUIREMENT,
            "arch": machine_arch(),
            "cmake_options": list(CMAKE_OPTIONS),
            "patches": patches,
            "compiler": compiler,
            "jobs": build_jobs(jobs),
            "seconds": round(time.monotonic() - t0, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (folder / "build.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        progress(f"built {folder / BUILD_TARGET} in {info['seconds']:.0f}s")
        return folder / BUILD_TARGET


def _prepared_source(work: Path, progress: ProgressFn) -> Path:
    """The unpacked llama.cpp tree under ``work``: reused when a former try unpacked it."""
    done = work / "src.done"
    if done.is_file():
        root = Path(done.read_text(encoding="utf-8").strip())
        if root.is_dir():
            progress(f"reusing the sources unpacked by an earlier try in {work}")
            return root
    shutil.rmtree(work / "src", ignore_errors=True)
    progress(f"downloading the {SOURCE_REQUIREMENT} sources from PyPI")
    archive = download_source(work / "sdist")
    root = extract_source(archive, work / "src")
    archive.unlink(missing_ok=True)
    done.write_text(str(root), encoding="utf-8")
    return root


def _compile(
    src: Path,
    out: Path,
    cmake: str,
    ninja: str | None,
    jobs: int,
    log_path: Path,
    progress: ProgressFn,
) -> Path:
    """Configure and build; returns the built binary inside ``out``."""
    gen = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []
    configure = [cmake, "-S", str(src), "-B", str(out), *gen, *CMAKE_OPTIONS]
    build = [cmake, "--build", str(out), "--target", BUILD_TARGET, "-j", str(jobs)]
    with open(log_path, "w", encoding="utf-8") as log:
        progress(f"configuring ({'ninja' if ninja else 'make'}, GGML_NATIVE=ON)")
        if _run_logged(configure, log) != 0:
            log.flush()
            raise ModelServerError(f"cmake configure failed; see {log_path}\n{_log_tail(log_path)}")
        progress(f"compiling the llama-server target with {jobs} jobs (10-20 min on 2 cores)")
        if _run_logged(build, log, progress) != 0:
            log.flush()
            raise ModelServerError(f"cmake build failed; see {log_path}\n{_log_tail(log_path)}")
    for cand in (out / "bin" / BUILD_TARGET, out / BUILD_TARGET):
        if cand.is_file():
            return cand
    found = sorted(out.rglob(BUILD_TARGET))
    if not found:
        raise ModelServerError(f"the build finished but no {BUILD_TARGET} is in {out}")
    return found[0]
