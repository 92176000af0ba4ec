"""`agentctl init DIR` (workers/project.py), AGENT_HOME and the project's spec file (issue #37)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from workers.config import (
    DIST_NAME,
    PROJECT_ROOT,
    Settings,
    builtin_spec_file,
    default_home,
    default_spec_file,
)
from workers.home import HOME_FILES, ensure_home_files, home_file, home_text
from workers.project import AGENT_NAME, TOOL_NAME, project_files
from workers.worker import project_import_path

ROOT = Path(__file__).resolve().parents[2]


def init(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", "init", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_init_writes_the_project_refuses_to_overwrite_and_its_tool_test_passes(tmp_path: Path):
    r = init("proj", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    proj = tmp_path / "proj"
    for rel in project_files("proj"):
        assert (proj / rel).is_file(), rel
    spec = yaml.safe_load((proj / "agents.yml").read_text())
    assert TOOL_NAME in spec["agents"][AGENT_NAME]["tools"]
    assert spec["tool_modules"] == ["tools.words"]
    env = (proj / ".env").read_text()
    for name in ("TEMPORAL_ADDRESS", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_API_KEY"):
        assert f"# {name}=" in env  # commented choices: nothing set by default
    assert (proj / ".env").stat().st_mode & 0o077 == 0

    # the tool test written into the project passes there, run by pytest as a user runs it
    t = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=proj,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert t.returncode == 0 and "2 passed" in t.stdout, t.stdout + t.stderr

    # a second init refuses: exit 2, one error line, the edited file kept
    (proj / "agents.yml").write_text("# mine\n")
    again = init("proj", cwd=tmp_path)
    assert again.returncode == 2
    lines = [ln for ln in again.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "agents.yml" in lines[0]
    assert (proj / "agents.yml").read_text() == "# mine\n"

    forced = init("proj", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "word-counter" in (proj / "agents.yml").read_text()


def test_init_refuses_when_any_one_file_exists_and_writes_nothing(tmp_path: Path):
    (tmp_path / "p" / "tools").mkdir(parents=True)
    (tmp_path / "p" / "tools" / "words.py").write_text("x = 1\n")
    r = init("p", cwd=tmp_path)
    assert r.returncode == 2 and "tools/words.py" in r.stderr
    assert not (tmp_path / "p" / "agents.yml").exists()


def test_agent_home_defaults_checkout_and_installed(tmp_path: Path):
    assert default_home(True) == PROJECT_ROOT / ".agent-runtime"
    assert default_home(False, {"XDG_DATA_HOME": str(tmp_path)}) == tmp_path / DIST_NAME
    local_share = Path.home() / ".local" / "share" / DIST_NAME
    assert default_home(False, {}) == local_share
    assert default_home(False, {"XDG_DATA_HOME": "relative"}) == local_share  # XDG: ignored
    s = Settings(home=str(tmp_path))
    assert s.state_dir == str(tmp_path)  # the state lives in AGENT_HOME unless set apart
    assert Settings(home=str(tmp_path), state_dir="/st").state_dir == "/st"
    assert builtin_spec_file(tmp_path, checkout=False) == tmp_path / "agents.yml"
    assert builtin_spec_file(tmp_path, checkout=True) == ROOT / "agents" / "agents.yml"


def test_a_project_agents_yml_in_the_working_folder_is_the_spec_file(tmp_path: Path):
    assert default_spec_file("/h", cwd=tmp_path) == str(builtin_spec_file("/h"))
    (tmp_path / "agents.yml").write_text("agents: {}\n")
    assert default_spec_file("/h", cwd=tmp_path) == str((tmp_path / "agents.yml").resolve())


def test_the_project_folder_goes_on_the_import_path_the_builtin_spec_does_not(tmp_path: Path):
    spec = tmp_path / "agents.yml"
    spec.write_text("agents: {}\n")
    try:
        assert project_import_path(Settings(spec_file=str(spec))) == tmp_path.resolve()
        assert sys.path[0] == str(tmp_path.resolve())
    finally:
        sys.path.remove(str(tmp_path.resolve()))
    builtin = Settings(spec_file=str(ROOT / "agents" / "agents.yml"))
    assert project_import_path(builtin) is None


@pytest.mark.parametrize("name", sorted(HOME_FILES))
def test_the_home_copies_keep_every_path_inside_agent_home(name: str):
    text = home_text(name)
    assert ".agent-runtime" not in text and "../" not in text
    assert text != (PROJECT_ROOT / "workers" / "data" / name).read_text()  # something rewritten


def test_installed_the_builtin_agents_are_written_into_home_once(tmp_path: Path):
    home = tmp_path / "home"
    s = Settings(home=str(home), spec_file=str(home / "agents.yml"))
    assert ensure_home_files(s, checkout=True) == []  # a checkout uses agents/agents.yml
    assert ensure_home_files(s, checkout=False) == [home / "agents.yml"]
    spec = yaml.safe_load((home / "agents.yml").read_text())
    assert spec["agents"]["default"]["workspace"] == "workspace"  # <AGENT_HOME>/workspace
    (home / "agents.yml").write_text("agents: {}\n")
    assert ensure_home_files(s, checkout=False) == []  # the user's copy is never overwritten
    assert home_file("agents.yml", home).read_text() == "agents: {}\n"
    dev = yaml.safe_load(home_file("temporal-dev.yml", home).read_text())
    assert dev["db_filename"] == "temporal.db"  # <AGENT_HOME>/temporal.db
