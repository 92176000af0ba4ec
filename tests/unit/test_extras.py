"""Optional extras (activities/extras.py): a missing one is an error naming the pip command."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import activities.memory.store_url as store_url
import activities.runtime as runtime
from activities.evals.contracts import RunRecord, SuiteProgress, Variant
from activities.evals.report import build_report
from activities.extras import MissingExtraError, install_hint, installed, require
from activities.spec import SpecError

ROOT = Path(__file__).resolve().parents[2]


def _missing(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make ``modules`` unimportable in this process (as if not installed)."""
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


def test_require_names_the_extra_and_the_pip_command(monkeypatch: pytest.MonkeyPatch):
    _missing(monkeypatch, "scipy", "scipy.stats")
    with pytest.raises(MissingExtraError) as e:
        require("scipy.stats", "evals", "the evaluation report")
    assert str(e.value).startswith("the evaluation report needs scipy")
    assert str(e.value).endswith(
        ", which is not installed: pip install 'temporal-agent-runtime[evals]'"
    )
    assert isinstance(e.value, ImportError)
    assert installed("json") and not installed("no_such_module_here")


def _progress(records: list[RunRecord]) -> SuiteProgress:
    variants = [Variant(name="a", agent="x"), Variant(name="b", agent="y")]
    return SuiteProgress(
        suite_id="s", dataset="d", variants=variants, repeat=1, total=4, records=records
    )


def _rec(case: str, variant: str, ok: bool) -> RunRecord:
    return RunRecord(
        case_id=case,
        variant=variant,
        repeat=0,
        run_id=f"{case}.{variant}",
        status="completed",
        passed=ok,
    )


def test_the_eval_report_needs_scipy_only_for_its_statistics(monkeypatch: pytest.MonkeyPatch):
    _missing(monkeypatch, "scipy", "scipy.stats")
    # one variant: no comparison, no scipy
    one = SuiteProgress(
        suite_id="s",
        dataset="d",
        variants=[Variant(name="a", agent="x")],
        repeat=1,
        total=1,
        records=[_rec("c1", "a", True)],
    )
    assert build_report(one)["variants"]["a"]["pass_at_1"] == 1.0
    # a comparison with discordant pairs: the McNemar test needs scipy
    recs = [_rec("c1", "a", True), _rec("c1", "b", False), _rec("c2", "a", False)]
    recs.append(_rec("c2", "b", True))
    with pytest.raises(MissingExtraError, match=r"pip install 'temporal-agent-runtime\[evals\]'"):
        build_report(_progress(recs))


def test_a_postgres_memory_url_without_psycopg_stops_the_worker_at_start(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(store_url, "installed", lambda module: module != "psycopg")
    with pytest.raises(
        MissingExtraError, match=r"pip install 'temporal-agent-runtime\[postgres\]'"
    ):
        store_url.configure("postgresql://u@127.0.0.1:5432/db")
    store_url.configure("sqlite://:memory:")  # SQLite needs no extra


def test_a_code_mode_spec_without_pydantic_monty_fails_as_the_run_starts(
    monkeypatch: pytest.MonkeyPatch,
):
    from activities.spec import resolve_agent
    from activities.spec_settings import CodeModeSpec

    monkeypatch.setattr(runtime, "installed", lambda module: module != "pydantic_monty")
    spec = resolve_agent(str(ROOT / "agents" / "agents.yml"), "default", "m")
    spec = spec.model_copy(update={"code_mode": CodeModeSpec(tools=["calculator"])})
    with pytest.raises(
        SpecError, match=r"code_mode: Code Mode needs pydantic-monty.*\[code-mode\]"
    ):
        runtime.RuntimeActivities._code_tool(spec, [])


def test_install_hint():
    assert install_hint("postgres") == "pip install 'temporal-agent-runtime[postgres]'"


def _make_prerequisites() -> dict[str, list[str]]:
    rules: dict[str, list[str]] = {}
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line and not line[0].isspace() and ":" in line and not line.startswith((".", "$", "#")):
            target, rest = line.split(":", 1)
            if " " not in target and "=" not in rest.split("##")[0][:1]:
                rules[target] = rest.split("##")[0].split()
    return rules


def test_the_servers_worker_and_demo_install_the_runtime_only():
    rules = _make_prerequisites()
    for target in ("dev-server", "worker", "model-server", "codec-server", "demo", "demo-check"):
        assert "runtime" in rules[target] and "install" not in rules[target], (
            target,
            rules[target],
        )
    for target in ("test", "test-unit", "security"):
        assert rules[target] == ["install"], (target, rules[target])


def test_the_extras_are_not_runtime_dependencies_and_the_tests_install_them():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime_deps = " ".join(project["dependencies"])
    extras = project["optional-dependencies"]
    for extra, package in (("evals", "scipy"), ("postgres", "psycopg"), ("code-mode", "monty"),
                           ("s3", "boto3")):  # fmt: skip
        assert package not in runtime_deps
        assert any(package in req for req in extras[extra])
    assert "temporal-agent-runtime[evals,postgres,code-mode,otel,s3]" in extras["test"]
