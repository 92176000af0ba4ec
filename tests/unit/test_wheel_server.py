"""The launcher of the xllamacpp wheel's server (workers/local/model/wheel_server.py).

The flag mapping and ``--help`` run without the wheel. The rest runs the launcher as the model
server does (``python -m workers.local.model.wheel_server --wheel-dir ...``) against the real
``xllamacpp`` wheel, installed once per test session with pip from PyPI into a temporary
``--target`` folder (about 34 MB, 1-3 s here): a missing, a foreign and a truncated model file
must each end in exit status 1 and one ``wheel-server: error:`` line saying what is wrong, and
the real ``CommonParams`` must take every setting the mapping makes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from workers.local.model import llama_binary as lb
from workers.local.model import server as ms
from workers.local.model import wheel_server as ws
from workers.local.model.files import ModelServerError, pip_install

MODULE = [sys.executable, "-m", ws.LAUNCHER_MODULE]


def _args(*argv: str):
    return ws.build_parser().parse_args(list(argv))


# --------------------------------------------------------------------------------------------
# flags, without the wheel
# --------------------------------------------------------------------------------------------


def test_help_lists_every_flag_the_model_server_passes():
    flags = lb.probe_flags(MODULE)  # the real --help, parsed as for any llama-server
    assert set(lb.REQUIRED_FLAGS) <= flags
    cmd = ms.server_command(Path("/m.gguf"), MODULE)  # every option, none dropped
    passed = {a for a in cmd[len(MODULE) :] if a.startswith("--")}
    assert passed <= flags, passed - flags
    assert passed <= ws.FLAGS
    assert cmd == ms.server_command(Path("/m.gguf"), MODULE, supported=flags)


def test_our_command_maps_onto_common_params(tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}", encoding="utf-8")
    model = tmp_path / "m.gguf"
    cmd = ms.server_command(
        model, MODULE, "127.0.0.1", 8110, 4096, 3, template, parallel=1, temperature=0.2
    )
    settings = ws.settings_from_args(ws.build_parser().parse_args(cmd[len(MODULE) :]))
    assert settings == {
        "model.path": str(model),
        "model_alias": {"qwen2.5-coder-1.5b-instruct"},
        "hostnames": ["127.0.0.1"],
        "port": 8110,
        "n_ctx": 4096,
        "cpuparams.n_threads": 3,
        "cpuparams_batch.n_threads": 3,
        "n_parallel": 1,
        "use_jinja": True,
        "chat_template": "{{ messages }}",  # the file's text, as llama-server reads it
        "enable_reasoning": 0,
        "sampling.temp": 0.2,
        "fit_params": False,
        "ui": False,
    }
    assert "cache_prompt" not in settings  # llama.cpp's default (on) is left alone


def test_flags_not_given_keep_llama_cpp_defaults_and_short_names_work():
    assert ws.settings_from_args(_args("-m", "/m.gguf")) == {
        "model.path": "/m.gguf",
        "hostnames": ["127.0.0.1"],
        "port": 8080,
    }
    got = ws.settings_from_args(
        _args("-m", "/m", "-c", "512", "-t", "1", "-tb", "2", "-np", "2", "-rea", "auto")
    )
    assert (got["n_ctx"], got["cpuparams.n_threads"], got["cpuparams_batch.n_threads"]) == (
        512,
        1,
        2,
    )
    assert (got["n_parallel"], got["enable_reasoning"]) == (2, -1)
    assert (
        ws.settings_from_args(_args("-m", "/m", "--no-jinja", "--fit", "on"))["use_jinja"] is False
    )
    assert ws.settings_from_args(_args("-m", "/m", "--fit", "on"))["fit_params"] is True


def test_unreadable_template_and_bad_flags_are_refused(tmp_path, capsys):
    with pytest.raises(ws.LaunchError, match="cannot read the chat template"):
        ws.settings_from_args(_args("-m", "/m", "--chat-template-file", str(tmp_path / "no")))
    for bad in (["--port", "80"], ["-m", "/m", "--fit", "maybe"], ["-m", "/m", "--reasoning", "x"]):
        with pytest.raises(SystemExit) as e:
            ws.build_parser().parse_args(bad)
        assert e.value.code == 2
    assert "--fit" in capsys.readouterr().err


def test_apply_settings_sets_nested_attributes_and_refuses_unknown_ones():
    params = SimpleNamespace(
        port=0, model=SimpleNamespace(path=""), cpuparams=SimpleNamespace(n_threads=-1)
    )
    ws.apply_settings(params, {"port": 9, "model.path": "/m", "cpuparams.n_threads": 2})
    assert (params.port, params.model.path, params.cpuparams.n_threads) == (9, "/m", 2)
    with pytest.raises(ws.LaunchError, match="no model.nope"):
        ws.apply_settings(params, {"model.nope": 1})
    with pytest.raises(ws.LaunchError, match="no n_ctx"):
        ws.apply_settings(params, {"n_ctx": 1})  # a field the object lacks is never created


def test_model_file_checks(tmp_path):
    with pytest.raises(ws.LaunchError, match="does not exist"):
        ws.check_model_file(tmp_path / "none.gguf")
    with pytest.raises(ws.LaunchError, match="is a directory"):
        ws.check_model_file(tmp_path)
    text = tmp_path / "model.gguf"
    text.write_text("<html>not found</html>")
    with pytest.raises(ws.LaunchError, match="is not a GGUF file"):
        ws.check_model_file(text)
    text.write_bytes(b"GGUF\x03\x00\x00\x00")
    ws.check_model_file(text)  # the magic is right: llama.cpp judges the rest


def test_system_libraries_are_looked_up_for_real(monkeypatch):
    assert ws.missing_system_libraries() == []  # this machine has libgomp1 and libstdc++6
    monkeypatch.setattr(ws, "SYSTEM_LIBRARIES", {"libgomp-gone.so.1": "libgomp1"})
    assert ws.missing_system_libraries() == ["libgomp-gone.so.1"]
    assert "sudo apt-get install libgomp1" in ws.system_library_hint(["libgomp-gone.so.1"])


def test_wheel_dir_without_the_wheel_says_how_to_install_it(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\0" * 60)
    proc = _run(tmp_path, "--model", str(model))
    assert proc.returncode == 1
    assert f"xllamacpp is not installed in {tmp_path}" in proc.stderr
    assert f"pip install --no-deps --target {tmp_path} {ws.WHEEL_REQUIREMENT}" in proc.stderr


# --------------------------------------------------------------------------------------------
# the real wheel
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def wheel_dir(tmp_path_factory) -> Path:
    """``xllamacpp`` installed from PyPI into a temporary ``--target`` folder, once a session."""
    target = tmp_path_factory.mktemp("xllamacpp")
    try:
        pip_install(target, [ws.WHEEL_REQUIREMENT])
    except ModelServerError as e:  # pragma: no cover - no PyPI, or no wheel for this platform
        pytest.fail(f"could not install {ws.WHEEL_REQUIREMENT} from PyPI: {e}")
    return target


def _run(wheel: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603
        [*MODULE, "--wheel-dir", str(wheel), "--port", "0", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


MARK = "wheel-server: error:"


def _error_line(proc: subprocess.CompletedProcess[str]) -> str:
    # llama.cpp logs from a thread of its own, on the same stderr: its next line's timestamp may
    # be written just before ours ("0.00.004.237 wheel-server: error: ..."), so the line is taken
    # from our mark on
    errors = [line[line.index(MARK) :] for line in proc.stderr.splitlines() if MARK in line]
    assert len(errors) == 1, proc.stderr[-2000:]
    return errors[0]


def test_missing_model_file_exits_1_with_a_clear_message(wheel_dir, tmp_path):
    missing = tmp_path / "nowhere" / "model.gguf"
    proc = _run(wheel_dir, "--model", str(missing))
    assert proc.returncode == 1
    assert _error_line(proc) == f"wheel-server: error: model file {missing} does not exist"


def test_foreign_file_exits_1_with_a_clear_message(wheel_dir, tmp_path):
    html = tmp_path / "model.gguf"  # what a proxy's error page saved as the model looks like
    html.write_text("<html>502 Bad Gateway</html>")
    proc = _run(wheel_dir, "--model", str(html))
    assert proc.returncode == 1
    assert "is not a GGUF file (it starts with b'<htm')" in _error_line(proc)


def test_truncated_gguf_reaches_llama_cpp_and_exits_1(wheel_dir, tmp_path):
    cut = tmp_path / "model.gguf"
    cut.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x01" * 24)  # right magic, then garbage
    proc = _run(wheel_dir, "--model", str(cut), "--fit", "off", "--no-webui")
    assert proc.returncode == 1
    line = _error_line(proc)
    assert line.startswith(f"wheel-server: error: llama.cpp could not start with {cut}")
    assert "load" in proc.stderr  # llama.cpp's own lines before it say where it stopped


def test_the_real_common_params_take_every_mapped_setting(wheel_dir, tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("{{ x }}", encoding="utf-8")
    argv = ms.server_command(tmp_path / "m.gguf", MODULE, "127.0.0.1", 8110, 4096, 3, template)
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(wheel_dir)!r})\n"
        "import xllamacpp as xlc\n"
        "from workers.local.model import wheel_server as ws\n"
        f"args = ws.build_parser().parse_args({argv[len(MODULE) :]!r})\n"
        "settings = ws.settings_from_args(args)\n"
        "p = ws.apply_settings(xlc.CommonParams(), settings)\n"
        "def get(d):\n"
        "    o = p\n"
        "    for n in d.split('.'): o = getattr(o, n)\n"
        "    return sorted(o) if isinstance(o, set) else o\n"
        "out = {d: get(d) for d in settings}\n"
        "out['cache_prompt'] = p.cache_prompt\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(  # noqa: S603
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["model.path"] == str(tmp_path / "m.gguf")
    assert got["model_alias"] == ["qwen2.5-coder-1.5b-instruct"]
    assert (got["hostnames"], got["port"], got["n_ctx"], got["n_parallel"]) == (
        ["127.0.0.1"],
        8110,
        4096,
        1,
    )
    assert (got["cpuparams.n_threads"], got["cpuparams_batch.n_threads"]) == (3, 3)
    assert got["chat_template"] == "{{ x }}" and got["use_jinja"] is True
    assert (got["enable_reasoning"], got["fit_params"], got["ui"]) == (0, False, False)
    assert abs(got["sampling.temp"] - 0.2) < 1e-6
    assert got["cache_prompt"] is True  # the per-slot prompt cache stays on
