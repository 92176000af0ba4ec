"""The wheel (`make dist`): installed into a fresh venv, `agentctl` runs from anywhere and writes
nothing inside the installed package (issue #37)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 240):
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{cmd}: {r.stdout}\n{r.stderr}"
    return r


def files_under(folder: Path) -> set[str]:
    return {
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if "__pycache__" not in p.parts and not p.name.endswith(".pyc")
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run(["make", "--no-print-directory", "dist", f"DIST={out}", f"PY={sys.executable}"], ROOT)
    (built,) = out.glob("temporal_agent_runtime-*.whl")
    return built


def test_the_wheel_holds_what_a_user_runs(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "workers/cli/__init__.py",
        "workers/worker.py",
        "workers/console/static/console.html",
        "workers/data/agents.yml",
        "workers/data/temporal-dev.yml",
        "activities/tools/data/bfcl_functions.json",
        "workers/local/model/templates/qwen2.5-tools.jinja",
    ):
        assert needed in names, needed
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "Name: temporal-agent-runtime" in text
    assert "Provides-Extra: code-mode" in text and "Provides-Extra: evals" in text
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "agentctl = workers.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    assert not any(n.startswith(("tests/", "bench/", "agents/")) for n in names)


def test_installed_agentctl_runs_anywhere_and_writes_nothing_in_the_package(
    wheel: Path, tmp_path: Path
):
    venv = tmp_path / "venv"
    # dependencies from this venv (offline); the package itself only from the wheel
    run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        tmp_path,
    )
    py = venv / "bin" / "python"
    site = Path(
        run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path
        ).stdout.strip()
    )
    # --system-site-packages gives the base interpreter's packages; this venv's own (not its
    # .pth files, so not the editable checkout) come after the new venv's, by a path file
    import sysconfig

    (site / "project-venv-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PYTHONPATH", None)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        tmp_path,
        env,
    )
    agentctl = venv / "bin" / "agentctl"
    where = run(
        [str(py), "-c", "import workers, os; print(os.path.dirname(workers.__file__))"],
        tmp_path,
        env,
    )
    assert Path(where.stdout.strip()).parent == site  # the wheel's copy, not the checkout's

    before = files_under(site)
    empty = tmp_path / "empty"
    empty.mkdir()
    env["XDG_DATA_HOME"] = str(tmp_path / "xdg")
    env.pop("AGENT_HOME", None)
    env.pop("AGENT_STATE_DIR", None)
    env.pop("AGENT_SPEC_FILE", None)
    assert "init" in run([str(agentctl), "--help"], empty, env).stdout
    run([str(agentctl), "init", "myproj"], empty, env)
    assert (empty / "myproj" / "agents.yml").is_file() and (
        empty / "myproj" / "tools" / "words.py"
    ).is_file()
    home = run(
        [
            str(py),
            "-c",
            "from workers.config import IN_CHECKOUT, load_settings as l; "
            "s = l(); print(IN_CHECKOUT, s.home, s.state_dir, s.spec_file)",
        ],
        empty,
        env,
    ).stdout.split()
    xdg_home = str(tmp_path / "xdg" / "temporal-agent-runtime")
    assert home == ["False", xdg_home, xdg_home, f"{xdg_home}/agents.yml"]
    # the packaged dev-server configuration is written into AGENT_HOME, its database there too
    dev = run(
        [str(py), "-c", "from workers.local.dev_config import find_dev_config as f; print(f())"],
        empty,
        env,
    )
    assert dev.stdout.strip() == f"{xdg_home}/temporal-dev.yml"
    # the project's tool test passes against the installed runtime (pytest from the deps)
    tested = run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider"], empty / "myproj", env)
    assert "2 passed" in tested.stdout
    # BFCL's tools read their docs from the package, not from beside a repository
    bfcl = run(
        [str(py), "-c", "import activities.tools.bfcl as b; print(b.FUNCTIONS, len(b.NAMES))"],
        empty,
        env,
    )
    path, count = bfcl.stdout.split()
    assert Path(path).is_relative_to(site) and int(count) > 10
    assert files_under(site) == before  # nothing written inside the installed package
