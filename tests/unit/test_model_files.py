"""The model files: the cache folder, joining and verifying the parts, installing them (workers/local/model/files.py)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from workers.local.model import files as mf


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("AGENT_MODEL_CACHE", str(tmp_path / "c"))
    assert mf.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("AGENT_MODEL_CACHE")
    assert mf.default_cache_dir() == Path.home() / ".cache" / "agent-runtime" / "model"


# --------------------------------------------------------------------------------------------
# ensure_model: joining, verifying, refusing
# --------------------------------------------------------------------------------------------

FAKE_PACKAGES = tuple(f"fake-part{i}" for i in (1, 2, 10))  # numeric, not lexical, order
FAKE_VERSION = "9.9.9"


def _make_fake_parts(cache: Path) -> bytes:
    """Unpacked fake part packages; returns the bytes the join must produce."""
    target = mf.packages_dir(cache)
    expected = b""
    for i, dist in enumerate(FAKE_PACKAGES):
        mod = dist.replace("-", "_")
        data = target / mod / "data"
        data.mkdir(parents=True)
        (target / f"{mod}-{FAKE_VERSION}.dist-info").mkdir()
        # two slices per package: sorted by name inside the package
        (data / "b.bin").write_bytes(f"[{i}b]".encode())
        (data / "a.bin").write_bytes(f"[{i}a]".encode())
        expected += f"[{i}a][{i}b]".encode()
    return expected


def _no_pip(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("pip must not run: everything is installed")

    monkeypatch.setattr(mf, "pip_install", boom)


def test_ensure_model_joins_in_part_order_and_caches(tmp_path, monkeypatch):
    content = _make_fake_parts(tmp_path)
    _no_pip(monkeypatch)
    sha = hashlib.sha256(content).hexdigest()
    path = mf.ensure_model(
        tmp_path,
        packages=FAKE_PACKAGES,
        version=FAKE_VERSION,
        expected_size=len(content),
        expected_sha256=sha,
    )
    assert path == tmp_path / mf.MODEL_FILENAME
    assert path.read_bytes() == content
    # parts pruned by default, no temp files left
    assert not (mf.packages_dir(tmp_path) / "fake_part1").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["pkgs", mf.MODEL_FILENAME, mf.MODEL_FILENAME + ".verified.json"]
    )

    # second call: the marker makes it cheap, no hashing
    def no_hash(_p):
        raise AssertionError("second call must not hash again")

    monkeypatch.setattr(mf, "sha256_file", no_hash)
    again = mf.ensure_model(
        tmp_path,
        packages=FAKE_PACKAGES,
        version=FAKE_VERSION,
        expected_size=len(content),
        expected_sha256=sha,
    )
    assert again == path


def test_ensure_model_refuses_hash_mismatch(tmp_path, monkeypatch):
    content = _make_fake_parts(tmp_path)
    _no_pip(monkeypatch)
    wrong = hashlib.sha256(b"something else").hexdigest()
    with pytest.raises(mf.ModelIntegrityError, match="refusing"):
        mf.ensure_model(
            tmp_path,
            packages=FAKE_PACKAGES,
            version=FAKE_VERSION,
            expected_size=len(content),
            expected_sha256=wrong,
        )
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "pkgs"]
    assert leftovers == []  # neither the bad file, nor a temp file, nor a marker


def test_ensure_model_refuses_size_mismatch(tmp_path, monkeypatch):
    content = _make_fake_parts(tmp_path)
    _no_pip(monkeypatch)
    with pytest.raises(mf.ModelIntegrityError):
        mf.ensure_model(
            tmp_path,
            packages=FAKE_PACKAGES,
            version=FAKE_VERSION,
            expected_size=len(content) + 1,
            expected_sha256=hashlib.sha256(content).hexdigest(),
        )
    assert not (tmp_path / mf.MODEL_FILENAME).exists()


def test_ensure_model_replaces_a_tampered_file(tmp_path, monkeypatch):
    content = _make_fake_parts(tmp_path)
    _no_pip(monkeypatch)
    sha = hashlib.sha256(content).hexdigest()
    kw: dict[str, Any] = dict(
        packages=FAKE_PACKAGES,
        version=FAKE_VERSION,
        expected_size=len(content),
        expected_sha256=sha,
        keep_parts=True,
    )
    path = mf.ensure_model(tmp_path, **kw)
    # same size, different bytes, marker no longer matches the mtime
    path.write_bytes(b"X" * len(content))
    os.utime(path, ns=(1, 1))
    assert mf.ensure_model(tmp_path, **kw) == path
    assert path.read_bytes() == content


def test_ensure_model_installs_only_missing_parts(tmp_path, monkeypatch):
    content = _make_fake_parts(tmp_path)
    target = mf.packages_dir(tmp_path)
    # pretend part 2 is not installed yet: pip will "install" it
    for p in target.glob("fake_part2*"):
        import shutil

        shutil.rmtree(p)
    calls = []

    def fake_pip(tgt, reqs):
        calls.append((tgt, list(reqs)))
        data = tgt / "fake_part2" / "data"
        data.mkdir(parents=True)
        (tgt / f"fake_part2-{FAKE_VERSION}.dist-info").mkdir()
        (data / "a.bin").write_bytes(b"[1a]")
        (data / "b.bin").write_bytes(b"[1b]")

    monkeypatch.setattr(mf, "pip_install", fake_pip)
    mf.ensure_model(
        tmp_path,
        packages=FAKE_PACKAGES,
        version=FAKE_VERSION,
        expected_size=len(content),
        expected_sha256=hashlib.sha256(content).hexdigest(),
    )
    assert calls == [(target, [f"fake-part2=={FAKE_VERSION}"])]


def test_pip_install_command(tmp_path, monkeypatch):
    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(mf.subprocess, "run", fake_run)
    mf.pip_install(tmp_path / "pkgs", ["a==1", "b==2"])
    cmd = seen["cmd"]
    assert cmd[:4] == [sys.executable, "-m", "pip", "install"]
    assert "--no-deps" in cmd
    assert cmd[cmd.index("--target") + 1] == str(tmp_path / "pkgs")
    assert cmd[-2:] == ["a==1", "b==2"]


def test_pip_install_failure_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(
        mf.subprocess,
        "run",
        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, "", "No matching distribution"),
    )
    with pytest.raises(mf.ModelServerError, match="No matching distribution"):
        mf.pip_install(tmp_path, ["nope==0"])
