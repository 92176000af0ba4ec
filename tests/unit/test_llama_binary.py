"""Finding and building llama-server: CPU checks, flags, the override, build steps and progress.

The compile itself is exercised by ``tests/slow`` (``make test-slow``); the order in which a
server is chosen, and the fallback when one crashes, are in ``test_llama_binary_choice.py``.
"""

from __future__ import annotations

import shutil
import signal
import sys
from pathlib import Path

import pytest

from tests.support.llama_stand_ins import stand_in_server
from workers.local.model import llama_binary as lb
from workers.local.model import llama_build as lbuild
from workers.local.model import server as ms

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
    server = stand_in_server(tmp_path / "llama-server", tmp_path / "calls", crash=False)
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
    server = stand_in_server(tmp_path / "my-llama-server", tmp_path / "calls", crash=False)
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
