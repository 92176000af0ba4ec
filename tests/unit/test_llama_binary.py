"""Choosing and building llama-server: CPU checks, the choice order, the crash fallback, flags,
build progress.

The compile itself is exercised by ``tests/slow`` (``make test-slow``); here the builder is
replaced by one that hands back a small stand-in server, so the decisions around it run for real:
a stand-in wheel server that dies with SIGILL at start, as a server built for newer CPUs does,
and a stand-in built server that answers ``/v1/models``. The choice order runs the real
``choose_binary`` with the CPU's architecture and ``/proc/cpuinfo`` flags set per case, the real
launcher's ``--help`` and an xllamacpp install marked as done (no pip).
"""

from __future__ import annotations

import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import Literal

import pytest

from workers.config import Settings
from workers.local.model import llama_binary as lb
from workers.local.model import llama_build as lbuild
from workers.local.model import server as ms
from workers.local.model import wheel_server as ws
from workers.local.model.process import stop_process

FAKE_HELP = """usage: llama-server [options]
  -m,    --model FNAME        model path
  --host HOST                 ip address to listen
  --port PORT                 port to listen
  --jinja                     use jinja template
  --chat-template-file JINJA  template file
  -a,    --alias STRING       alias
  -c,    --ctx-size N         context size
  -t,    --threads N          threads
  -tb,   --threads-batch N    threads for batches
  -np,   --parallel N         slots
  --temp N                    temperature
  --reasoning-format FORMAT   thinking
"""

SERVER = """#!{python}
import http.server, json, os, signal, sys
args = sys.argv[1:]
with open({calls!r}, "a") as fh:
    fh.write({name!r} + " " + " ".join(args) + "\\n")
if "--help" in args:
    print({help!r})
    sys.exit(0)
if {crash}:
    print("AMX is not ready to be used!", flush=True)
    os.kill(os.getpid(), signal.SIGILL)
port = int(args[args.index("--port") + 1])

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({{"data": [{{"id": "qwen2.5-coder-1.5b-instruct"}}]}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _script(path: Path, calls: Path, *, crash: bool) -> Path:
    path.write_text(
        SERVER.format(
            python=sys.executable, calls=str(calls), name=path.name, help=FAKE_HELP, crash=crash
        )
    )
    path.chmod(0o755)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# the CPU and the prebuilt wheel
# --------------------------------------------------------------------------------------------


def test_prebuilt_fits_only_x86_with_avx512_and_amx():
    full = lb.PREBUILT_CPU_FLAGS | {"sse4_2", "avx2"}
    assert lb.prebuilt_fits("x86_64", full)[0] is True
    zen3 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"})  # AVX2, no AVX-512
    ok, why = lb.prebuilt_fits("x86_64", zen3)
    assert not ok and "avx512f" in why and "amx_tile" in why
    no_amx = full - {"amx_tile", "amx_int8", "amx_bf16"}  # e.g. Ice Lake: AVX-512, no AMX
    assert lb.prebuilt_fits("x86_64", no_amx)[0] is False
    assert lb.prebuilt_fits("arm64", full) == (
        False,
        "the prebuilt llama-server is for x86_64, this CPU is arm64",
    )


def test_cpu_flags_from_cpuinfo(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert lbuild.cpu_flags(x86) == frozenset({"fpu", "sse2", "avx2"})
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd sve\n")
    assert lbuild.cpu_flags(arm) == frozenset({"fp", "asimd", "sve"})
    assert lbuild.cpu_flags(tmp_path / "missing") == frozenset()


def test_cache_key_follows_cpu_and_version():
    a = lbuild.cpu_key("x86_64", frozenset({"avx2", "sse2"}))
    assert a == lbuild.cpu_key("x86_64", frozenset({"sse2", "avx2"}))  # order does not matter
    assert a != lbuild.cpu_key("x86_64", frozenset({"avx2", "sse2", "avx512f"}))
    assert a != lbuild.cpu_key("arm64", frozenset({"avx2", "sse2"}))
    assert a.startswith(f"{lbuild.SOURCE_VERSION}-r{lbuild.BUILD_RECIPE}-x86_64-")


def test_amx_is_kept_out_of_native_builds_on_amx_cpus_only(tmp_path):
    cml = tmp_path / "ggml" / "src" / "ggml-cpu" / "CMakeLists.txt"
    cml.parent.mkdir(parents=True)
    original = "if (GGML_NATIVE)\n    list(APPEND ARCH_FLAGS -march=native)\nendif()\n"
    cml.write_text(original)
    lines: list[str] = []
    avx2 = frozenset({"avx2", "fma"})
    assert lbuild.patch_source(tmp_path, lines.append, avx2, "x86_64") == []
    amx = avx2 | {"avx512f", "amx_tile", "amx_int8"}
    assert lbuild.patch_source(tmp_path, lines.append, amx, "arm64") == []
    assert cml.read_text() == original
    done = lbuild.patch_source(tmp_path, lines.append, amx, "x86_64")
    assert len(done) == 1
    assert "-march=native -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)" in cml.read_text()
    assert lbuild.patch_source(tmp_path, lines.append, amx, "x86_64") == done  # idempotent
    assert cml.read_text().count("-mno-amx-tile") == 1


def test_describe_exit_names_sigill():
    assert lb.describe_exit(3) == "exit 3"
    text = lb.describe_exit(-signal.SIGILL)
    assert "SIGILL" in text and "exit -4" in text and "instruction" in text


# --------------------------------------------------------------------------------------------
# flags and the command line
# --------------------------------------------------------------------------------------------


def test_probe_flags_reads_help_and_command_drops_unknown(tmp_path):
    server = _script(tmp_path / "llama-server", tmp_path / "calls", crash=False)
    flags = lb.probe_flags(server)
    assert {"--jinja", "--chat-template-file", "--reasoning-format"} <= flags
    assert "--reasoning" not in flags and "--fit" not in flags
    cmd = ms.server_command(tmp_path / "m.gguf", server, supported=flags)
    assert "--jinja" in cmd and "--chat-template-file" in cmd
    assert "--reasoning" not in cmd and "--fit" not in cmd and "--no-webui" not in cmd
    assert cmd[cmd.index("--threads-batch") + 1] == "2"
    # unknown flags (probe found none): every option is kept
    assert "--reasoning" in ms.server_command(tmp_path / "m.gguf", server)


def test_probe_flags_refuses_a_server_without_jinja(tmp_path):
    old = tmp_path / "old-server"
    old.write_text(f"#!{sys.executable}\nprint('--model --host --port')\n")
    old.chmod(0o755)
    with pytest.raises(ms.ModelServerError, match="lacks --jinja"):
        lb.probe_flags(old)


def test_probe_flags_reports_a_crash_as_cannot_run(tmp_path):
    bad = tmp_path / "sigill"
    bad.write_text(f"#!{sys.executable}\nimport os, signal\nos.kill(os.getpid(), signal.SIGILL)\n")
    bad.chmod(0o755)
    with pytest.raises(lb.BinaryCannotRun, match="SIGILL"):
        lb.probe_flags(bad)


def test_override_is_used_as_is(tmp_path):
    server = _script(tmp_path / "my-llama-server", tmp_path / "calls", crash=False)
    lines: list[str] = []
    got = lb.choose_binary(tmp_path / "cache", override=str(server), progress=lines.append)
    assert got.path == server and got.origin == "env" and "--jinja" in got.flags
    assert not (tmp_path / "cache").exists()  # nothing installed, nothing built
    with pytest.raises(ms.ModelServerError, match="not an executable file"):
        lb.choose_binary(tmp_path / "cache", override=str(tmp_path / "nope"))


def test_build_progress_lines():
    assert lbuild.progress_percent("[103/206] Building CXX object src/llama.cpp.o") == 50
    assert lbuild.progress_percent("[ 42%] Building CXX object x.o") == 42
    assert lbuild.progress_percent("-- Configuring done") is None


def test_cached_build_is_found_only_for_this_cpu(tmp_path):
    assert lbuild.built_binary(tmp_path) is None
    folder = lbuild.build_dir(tmp_path)
    folder.mkdir(parents=True)
    (folder / "llama-server").write_text("#!/bin/sh\n")
    (folder / "llama-server").chmod(0o755)
    assert lbuild.built_binary(tmp_path) is None  # no build.json: an interrupted build
    (folder / "build.json").write_text("{}")
    assert lbuild.built_binary(tmp_path) == folder / "llama-server"
    assert lbuild.built_binary(tmp_path, key="0.0.0-arm64-abc") is None


# --------------------------------------------------------------------------------------------
# the choice order, per CPU
# --------------------------------------------------------------------------------------------

AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"})  # e.g. AMD Zen 3, Haswell
AMX = AVX2 | lb.PREBUILT_CPU_FLAGS  # e.g. Xeon Sapphire Rapids
IVY_BRIDGE = frozenset({"sse4_2", "avx", "f16c"})  # AVX, no AVX2/FMA/BMI2


def test_wheel_fits_avx2_x86_and_any_arm64():
    assert lb.wheel_fits("x86_64", AVX2)[0] is True
    assert lb.wheel_fits("x86_64", AMX)[0] is True
    ok, why = lb.wheel_fits("x86_64", IVY_BRIDGE)
    assert not ok and why.endswith("avx2 bmi2 fma missing")
    assert lb.wheel_fits("x86_64", AVX2 - {"bmi2"})[0] is False
    assert lb.wheel_fits("arm64", frozenset())[0] is True  # armv8-a: no flag needed
    assert lb.wheel_fits("arm64", frozenset({"fp", "asimd"}))[0] is True
    ok, why = lb.wheel_fits("riscv64", AVX2)
    assert not ok and "riscv64" in why


@pytest.fixture
def cpu(monkeypatch):
    """Set the architecture and the cpuinfo flags the choice sees: ``cpu("x86_64", AVX2)``."""

    def set_cpu(arch: str, flags: frozenset[str]) -> None:
        monkeypatch.setattr(lbuild, "machine_arch", lambda: arch)
        monkeypatch.setattr(lbuild, "cpu_flags", lambda cpuinfo=None: flags)

    return set_cpu


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    """An xllamacpp install marked done, a fake build, a fake prebuilt; what each was asked."""
    cache = tmp_path / "cache"
    dist = lb.packages_dir(cache) / f"{ws.WHEEL_PACKAGE}-{ws.WHEEL_VERSION}.dist-info"
    dist.mkdir(parents=True)
    built = _script(tmp_path / "built-llama-server", tmp_path / "calls", crash=False)
    prebuilt = _script(tmp_path / "prebuilt-llama-server", tmp_path / "calls", crash=False)
    asked: list[str] = []

    def fake_build(cache_dir, progress, *, jobs=None, key=None):
        asked.append("build")
        return built

    def fake_prebuilt(cache_dir):
        asked.append("prebuilt")
        return prebuilt

    monkeypatch.setattr(lbuild, "build_llama_server", fake_build)
    monkeypatch.setattr(lb, "ensure_prebuilt", fake_prebuilt)
    return cache, asked


def _cache_a_build(cache: Path) -> Path:
    folder = lbuild.build_dir(cache)
    folder.mkdir(parents=True)
    (folder / "build.json").write_text("{}")
    return _script(folder / "llama-server", folder / "calls", crash=False)


def test_auto_takes_the_wheel_on_avx2_and_arm64_even_with_a_cached_build(cpu, stand_ins):
    cache, asked = stand_ins
    for arch, flags in (("x86_64", AVX2), ("arm64", frozenset({"fp", "asimd"})), ("x86_64", AMX)):
        cpu(arch, flags)
        if lbuild.built_binary(cache) is None:
            _cache_a_build(cache)
        lines: list[str] = []
        got = lb.choose_binary(cache, progress=lines.append)
        assert got.origin == "wheel", (arch, flags)
        assert got.path == lb.packages_dir(cache) / "xllamacpp"
        assert got.argv[:3] == [sys.executable, "-m", ws.LAUNCHER_MODULE]
        assert got.argv[3:] == ["--wheel-dir", str(lb.packages_dir(cache))]
        assert set(lb.REQUIRED_FLAGS) <= got.flags  # the real launcher's --help
        assert got.marker == ws.LAUNCHER_MODULE
        assert "xllamacpp wheel" in lines[0]
    assert asked == []  # neither built nor the AMX wheel


def test_auto_without_avx2_builds_or_reuses_the_build(cpu, stand_ins):
    cache, asked = stand_ins
    cpu("x86_64", IVY_BRIDGE)
    lines: list[str] = []
    got = lb.choose_binary(cache, progress=lines.append)
    assert got.origin == "built" and asked == ["build"]
    assert "avx2 bmi2 fma missing" in lines[0] and "from source" in lines[1]
    build = _cache_a_build(cache)
    got = lb.choose_binary(cache, progress=lines.append)
    assert (got.origin, got.path, asked) == ("built", build, ["build"])  # reused, not rebuilt


def test_auto_never_picks_the_amx_wheel_and_prebuilt_forces_it(cpu, stand_ins):
    cache, asked = stand_ins
    cpu("x86_64", AMX - {"avx2"})  # AVX-512 and AMX, but the wheel check says no
    assert lb.choose_binary(cache, progress=lambda _m: None).origin == "built"
    assert asked == ["build"]
    got = lb.choose_binary(cache, mode="prebuilt", progress=lambda _m: None)
    assert got.origin == "prebuilt" and asked == ["build", "prebuilt"]
    assert got.marker == "prebuilt-llama-server"


def test_wheel_and_source_modes_force_their_path(cpu, stand_ins):
    cache, asked = stand_ins
    cpu("x86_64", IVY_BRIDGE)
    assert lb.choose_binary(cache, mode="wheel", progress=lambda _m: None).origin == "wheel"
    cpu("x86_64", AVX2)
    assert lb.choose_binary(cache, mode="source", progress=lambda _m: None).origin == "built"
    assert asked == ["build"]


def test_a_wheel_noted_unusable_is_skipped_on_this_cpu_only(cpu, stand_ins):
    cache, asked = stand_ins
    cpu("x86_64", AVX2)
    lb.mark_unusable(cache, "killed by SIGILL", "wheel")
    lines: list[str] = []
    assert lb.choose_binary(cache, progress=lines.append).origin == "built"
    assert "crashed on this CPU before" in lines[0] and asked == ["build"]
    cpu("x86_64", AVX2 | {"avx512f"})  # another CPU sharing the cache folder
    assert lb.choose_binary(cache, progress=lambda _m: None).origin == "wheel"


def test_missing_libgomp_is_named_with_the_package_to_install(cpu, stand_ins, monkeypatch):
    cache, asked = stand_ins
    cpu("x86_64", AVX2)
    libs = {"libgomp-not-here.so.1": "libgomp1", **ws.SYSTEM_LIBRARIES}
    monkeypatch.setattr(ws, "SYSTEM_LIBRARIES", libs)
    with pytest.raises(lb.MissingSystemLibrary) as e:
        lb.choose_binary(cache, progress=lambda _m: None)
    assert "libgomp-not-here.so.1" in str(e.value) and "apt-get install libgomp1" in str(e.value)
    assert "libstdc++" not in str(e.value).split(":")[0]  # only what is missing is named
    assert "AGENT_LLAMA_BUILD=source" in str(e.value) and asked == []


# --------------------------------------------------------------------------------------------
# a wheel server that dies with SIGILL at start: noted, built, started
# --------------------------------------------------------------------------------------------


@pytest.fixture
def fallback_setup(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    wheel = _script(tmp_path / "wheel-server", calls, crash=True)
    prebuilt = _script(tmp_path / "prebuilt-llama-server", calls, crash=True)
    built = _script(tmp_path / "built-llama-server", calls, crash=False)
    builds: list[Path] = []

    def fake_build(cache_dir, progress, *, jobs=None, key=None):
        builds.append(Path(cache_dir))
        progress("building llama-server:  50%  [103/206] (stand-in)")
        return built

    def fake_wheel(cache_dir, progress=print):
        return lb.ServerBinary(
            Path(cache_dir) / "pkgs" / "xllamacpp", "wheel", command=(str(wheel),)
        )

    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setattr(lbuild, "build_llama_server", fake_build)
    monkeypatch.setattr(lb, "ensure_wheel", fake_wheel)
    monkeypatch.setattr(lb, "ensure_prebuilt", lambda cache_dir: prebuilt)
    monkeypatch.setattr(lb, "wheel_fits", lambda: (True, "this CPU fits (stand-in)"))
    monkeypatch.setattr(ms, "ensure_model", lambda cache_dir, progress=None: model)
    return calls, builds


def _start(tmp_path, lines, mode: Literal["auto", "wheel", "source", "prebuilt"] = "auto"):
    return ms.start_server(
        tmp_path / "cache",
        "127.0.0.1",
        _free_port(),
        progress=lines.append,
        ready_timeout=30,
        settings=Settings(llama_build=mode),
        pid_file=tmp_path / "model-server.pid",
    )


def test_wheel_crash_at_start_falls_back_to_a_build(tmp_path, fallback_setup):
    calls, builds = fallback_setup
    lines: list[str] = []
    handle = _start(tmp_path, lines)
    try:
        assert handle.binary is not None and handle.binary.origin == "built"
        assert handle.process.poll() is None
        pid_lines = (tmp_path / "model-server.pid").read_text().split()
        assert pid_lines == [str(handle.process.pid), "built-llama-server"]  # pid and marker
    finally:
        stop_process(handle.process)
    assert len(builds) == 1
    assert any("SIGILL" in line and "building llama-server from source" in line for line in lines)
    assert lb.marked_unusable(tmp_path / "cache", "wheel")
    assert not lb.marked_unusable(tmp_path / "cache", "prebuilt")
    started = [c.split()[0] for c in calls.read_text().splitlines() if "--help" not in c]
    assert started == ["wheel-server", "built-llama-server"]

    # next start on this CPU: the wheel is not tried again
    calls.write_text("")
    handle = _start(tmp_path, lines)
    stop_process(handle.process)
    assert [c.split()[0] for c in calls.read_text().splitlines()] == ["built-llama-server"] * 2


def test_wheel_exit_with_a_status_is_reported_not_taken_for_the_cpu(tmp_path, fallback_setup):
    _calls, builds = fallback_setup
    failing = tmp_path / "wheel-server"  # replaces the stand-in: exits 1 like a bad model file
    failing.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"if '--help' in sys.argv: print({FAKE_HELP!r}); sys.exit(0)\n"
        "print('wheel-server: error: model file /m.gguf does not exist', file=sys.stderr)\n"
        "sys.exit(1)\n"
    )
    with pytest.raises(lb.BinaryCannotRun, match="does not exist") as e:
        _start(tmp_path, [])
    assert e.value.returncode == 1 and not e.value.by_signal
    assert builds == [] and not lb.marked_unusable(tmp_path / "cache", "wheel")


def test_forced_wheel_or_prebuilt_crash_is_an_error(tmp_path, fallback_setup):
    _calls, builds = fallback_setup
    modes: tuple[Literal["wheel", "prebuilt"], ...] = ("wheel", "prebuilt")
    for mode in modes:
        with pytest.raises(lb.BinaryCannotRun, match="SIGILL") as e:
            _start(tmp_path, [], mode=mode)
        assert e.value.by_signal
    assert builds == []


def test_source_mode_never_starts_a_wheel(tmp_path, fallback_setup):
    calls, builds = fallback_setup
    handle = _start(tmp_path, [], mode="source")
    stop_process(handle.process)
    assert handle.binary is not None and handle.binary.origin == "built" and len(builds) == 1
    assert "wheel" not in calls.read_text() and "prebuilt" not in calls.read_text()


def test_extract_source_takes_only_the_vendored_tree(tmp_path):
    import io
    import tarfile

    archive = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in {
            "llama_cpp_python-0.3.36/pyproject.toml": b"x",
            "llama_cpp_python-0.3.36/vendor/llama.cpp/CMakeLists.txt": b"cmake",
            "llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-x.gguf": b"big",
            "llama_cpp_python-0.3.36/vendor/llama.cpp/tools/server/main.cpp": b"int main",
        }.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    root = lbuild.extract_source(archive, tmp_path / "src")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["CMakeLists.txt", "tools/server/main.cpp"]
    assert not (tmp_path / "src" / "llama_cpp_python-0.3.36" / "pyproject.toml").exists()


def test_build_without_compiler_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(lbuild, "find_compiler", lambda: None)
    with pytest.raises(ms.ModelServerError, match="C\\+\\+ compiler") as e:
        lbuild.build_llama_server(tmp_path, lambda _m: None)
    assert "AGENT_LLAMA_SERVER" in str(e.value)


def test_build_output_is_logged_and_reported_in_percent_steps(tmp_path):
    script = "for i in range(1, 41): print(f'[{i}/40] Building CXX object f{i}.o')"
    lines: list[str] = []
    log_path = tmp_path / "build.log"
    with open(log_path, "w") as log:
        code = lbuild._run_logged([sys.executable, "-c", script], log, lines.append, step=25)
    assert code == 0
    logged = log_path.read_text().splitlines()
    assert logged[0].startswith("$ ") and len(logged) == 41  # the command, then all output
    pcts = [int(line.split(":")[1].split("%")[0]) for line in lines]
    assert pcts == [2, 25, 50, 75, 100]


def _fake_tool(path: Path, version_line: str) -> Path:
    """A stand-in for a native tool: `/bin/echo` copied (an ELF binary), printing its argv."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy("/bin/echo", path)
    path.chmod(0o755)
    return path


def test_build_tools_come_from_pypi_when_the_machine_has_none(tmp_path, monkeypatch):
    monkeypatch.setattr(lbuild.shutil, "which", lambda name: None)
    installed: list[list[str]] = []

    def fake_pip(target, reqs):  # what `pip install --target` leaves for the two wheels
        installed.append(list(reqs))
        _fake_tool(target / "cmake" / "data" / "bin" / "cmake", "cmake version 3.31.6")
        (target / "bin").mkdir(parents=True, exist_ok=True)
        (target / "bin" / "cmake").write_text("#!/usr/bin/python\n")  # the shim: not used
        _fake_tool(target / "bin" / "ninja", "1.13.0")

    monkeypatch.setattr(lbuild, "pip_install", fake_pip)
    lines: list[str] = []
    cmake, ninja = lbuild.ensure_build_tools(tmp_path, lines.append)
    tools = tmp_path / "build-tools"
    assert cmake == str(tools / "cmake" / "data" / "bin" / "cmake")
    assert ninja == str(tools / "bin" / "ninja")
    assert installed == [["cmake", "ninja"]] and "from PyPI" in lines[0]
    # second time: already in the cache, pip is not run again
    assert lbuild.ensure_build_tools(tmp_path, lines.append) == (cmake, ninja)
    assert len(installed) == 1


def test_too_old_cmake_on_path_is_replaced(tmp_path, monkeypatch):
    old = tmp_path / "bin" / "cmake"  # on PATH: a script that says it is 3.10
    old.parent.mkdir()
    old.write_text("#!/bin/sh\necho 'cmake version 3.10.2'\n")
    old.chmod(0o755)
    assert not lbuild._cmake_ok(str(old))
    ninja = _fake_tool(tmp_path / "bin" / "ninja", "1.11.1")
    monkeypatch.setattr(
        lbuild.shutil, "which", lambda name: {"cmake": str(old), "ninja": str(ninja)}.get(name)
    )
    installed: list[list[str]] = []

    def fake_pip(target, reqs):
        installed.append(list(reqs))
        _fake_tool(target / "cmake" / "data" / "bin" / "cmake", "cmake version 3.31.6")

    monkeypatch.setattr(lbuild, "pip_install", fake_pip)
    cmake, got_ninja = lbuild.ensure_build_tools(tmp_path / "cache", lambda _m: None)
    assert installed == [["cmake"]] and got_ninja == str(ninja)
    assert cmake.endswith("cmake/data/bin/cmake")
