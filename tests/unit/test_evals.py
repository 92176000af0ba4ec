"""Evaluations without a server: scorers, pass^k, the paired report, datasets, BFCL conversion."""

from __future__ import annotations

import json

import pytest

from activities.evals.contracts import (
    Approver,
    ApproverRule,
    Case,
    ExpectedCall,
    RunFacts,
    RunRecord,
    ScorerConfig,
    SuiteProgress,
    Variant,
)
from activities.evals.dataset import DatasetError, load_dataset
from activities.evals.report import build_report, pass_hat_k
from activities.evals.scorers import (
    arguments_match,
    output_match,
    passed,
    score_run,
    tool_calls_match,
    trajectory_match,
)
from workers.cli.evals import variants_of


def _run(output: str = "", calls: list[tuple[str, dict]] | None = None, **kw) -> RunFacts:
    tc = [{"name": n, "arguments": a, "status": "ok"} for n, a in calls or []]
    return RunFacts(status=kw.pop("status", "completed"), output=output, tool_calls=tc, **kw)


def test_output_match_modes() -> None:
    cfg = ScorerConfig()
    case = Case(id="a", input="q", expected="Paris")
    assert output_match(case, _run("The capital is  paris."), cfg).passed
    assert not output_match(case, _run("Lyon"), cfg).passed
    exact = case.model_copy(update={"metadata": {"match": "exact"}})
    assert output_match(exact, _run(" paris "), cfg).passed
    assert not output_match(exact, _run("paris!"), cfg).passed
    assert not output_match(exact, _run("paris"), ScorerConfig(case_sensitive=True)).passed
    rx = Case(id="r", input="q", expected=r"^\d+ apples$", metadata={"match": "regex"})
    assert output_match(rx, _run("12 apples"), cfg).passed
    bad = Case(id="b", input="q", expected="(", metadata={"match": "regex"})
    s = output_match(bad, _run("x"), cfg)
    assert s.passed is False and "bad regex" in s.detail


def test_arguments_match_literals_one_of_optional_and_extras() -> None:
    exp = {"base": 10, "unit": {"one_of": ["units", "cm"], "optional": True}}
    assert arguments_match(exp, {"base": 10.0})[0]
    assert arguments_match(exp, '{"base": 10, "unit": "cm"}')[0]
    assert arguments_match(exp, {"base": 10, "unit": None})[0]  # null = not given
    assert not arguments_match(exp, {"base": 11})[0]
    assert not arguments_match(exp, {"base": 10, "unit": "m"})[0]
    assert "unexpected" in arguments_match(exp, {"base": 10, "colour": "red"})[1]
    assert "missing" in arguments_match({"a": {"one_of": [1]}}, {})[1]
    assert not arguments_match({"flag": True}, {"flag": 1})[0]  # a bool is not a number
    assert not arguments_match({"a": 1}, "not json")[0]


def test_tool_calls_ordered_unordered_and_extra() -> None:
    case = Case(
        id="t",
        input="q",
        expected_tool_calls=[ExpectedCall(name="a", arguments={"x": 1}), ExpectedCall(name="b")],
    )
    in_order = _run(calls=[("a", {"x": 1}), ("b", {})])
    swapped = _run(calls=[("b", {}), ("a", {"x": 1})])
    extra = _run(calls=[("a", {"x": 1}), ("c", {}), ("b", {})])
    assert tool_calls_match(case, in_order, ScorerConfig()).passed
    assert not tool_calls_match(case, swapped, ScorerConfig()).passed
    assert tool_calls_match(case, swapped, ScorerConfig(tool_calls_ordered=False)).passed
    assert not tool_calls_match(case, extra, ScorerConfig()).passed
    assert tool_calls_match(case, extra, ScorerConfig(allow_extra_calls=True)).passed
    wrong = _run(calls=[("a", {"x": 2}), ("b", {})])
    assert not tool_calls_match(case, wrong, ScorerConfig(tool_calls_ordered=False)).passed


def test_trajectory_modes() -> None:
    case = Case(id="t", input="q", metadata={"trajectory": ["a", "b"]})
    run = _run(calls=[("a", {}), ("c", {}), ("b", {})])
    assert not trajectory_match(case, run, ScorerConfig(trajectory="exact")).passed
    assert trajectory_match(case, run, ScorerConfig(trajectory="in_order")).passed
    backwards = _run(calls=[("b", {}), ("a", {})])
    assert not trajectory_match(case, backwards, ScorerConfig(trajectory="in_order")).passed
    assert trajectory_match(case, backwards, ScorerConfig(trajectory="any_order")).passed


def test_limits_and_pass() -> None:
    case = Case(id="c", input="q", expected="ok")
    run = _run("ok", total_tokens=500, cost_usd=0.01, latency_ms=900)
    scores = score_run(case, run, ScorerConfig(max_tokens=400))
    by = {s.name: s for s in scores}
    assert by["tokens"].passed is False and by["cost_usd"].passed is None
    assert by["latency_ms"].value == 900
    assert not passed("completed", scores)
    assert passed("completed", score_run(case, run, ScorerConfig()))
    assert not passed("max_turns", score_run(case, run, ScorerConfig()))


def test_pass_hat_k() -> None:
    assert pass_hat_k(3, 3, 3) == 1.0
    assert pass_hat_k(2, 3, 3) == 0.0
    assert pass_hat_k(2, 4, 2) == pytest.approx(1 / 6)
    assert pass_hat_k(0, 0, 1) == 0.0


def _rec(
    case: str, variant: str, ok: bool, repeat: int = 0, tokens: int = 100, ms: float = 1000
) -> RunRecord:
    return RunRecord(
        case_id=case,
        variant=variant,
        repeat=repeat,
        run_id=f"{case}.{variant}.{repeat}",
        status="completed",
        passed=ok,
        tokens=tokens,
        latency_ms=ms,
    )


def test_report_paired_comparison() -> None:
    cases = [f"c{i}" for i in range(20)]
    recs = [_rec(c, "a", i % 2 == 0) for i, c in enumerate(cases)]
    recs += [_rec(c, "b", True, tokens=150, ms=2000) for c in cases]
    prog = SuiteProgress(
        suite_id="s",
        dataset="d",
        variants=[Variant(name="a", agent="x"), Variant(name="b", agent="y")],
        repeat=1,
        total=40,
        records=recs,
        done=True,
    )
    rep = build_report(prog)
    assert rep["variants"]["a"]["pass_at_1"] == 0.5 and rep["variants"]["b"]["pass_at_1"] == 1.0
    c = rep["comparison"]
    assert c["difference"] == pytest.approx(0.5)
    assert 0.2 < c["ci_low"] < 0.5 < c["ci_high"] <= 0.8
    assert c["discordant"] == {"baseline_only": 0, "candidate_only": 10}
    assert c["mcnemar_p"] == pytest.approx(2 * 0.5**10)
    assert c["delta_tokens"] == 50 and c["delta_p95_ms"] == pytest.approx(1000)
    assert build_report(prog) == rep  # the bootstrap is seeded: the same report twice


def test_approver_rules() -> None:
    ap = Approver(rules=[ApproverRule(tool="deploy*", decision="reject")], default="approve")
    assert ap.decide("deploy_prod").decision == "reject"
    assert ap.decide("read_file").decision == "approve"


def test_jsonl_dataset_with_header(tmp_path) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text(
        json.dumps(
            {
                "dataset": {
                    "name": "mine",
                    "approver": {"default": "reject"},
                    "scorers": {"match": "exact"},
                }
            }
        )
        + "\n# a comment\n\n"
        + json.dumps({"id": "1", "input": "hi", "expected": "hello", "metadata": {"k": 1}})
        + "\n"
    )
    ds = load_dataset(p)
    assert ds.name == "mine" and ds.approver.default == "reject" and ds.scorers.match == "exact"
    assert ds.cases[0].expected == "hello" and ds.cases[0].metadata == {"k": 1}


@pytest.mark.parametrize(
    "body, problem",
    [
        ('{"id": "1"}\n', "input"),
        ('{"id": "1", "input": "a"}\n{"id": "1", "input": "b"}\n', "twice"),
        ("not json\n", "not JSON"),
        ("", "no cases"),
        ('{"dataset": {"scorers": {"match": "fuzzy"}}}\n{"id": "1", "input": "a"}\n', "header"),
    ],
)
def test_jsonl_dataset_errors_name_the_line(tmp_path, body, problem) -> None:
    p = tmp_path / "d.jsonl"
    p.write_text(body)
    with pytest.raises(DatasetError, match=problem):
        load_dataset(p)


def test_pydantic_evals_yaml_import(tmp_path) -> None:
    p = tmp_path / "my_tests.yaml"
    p.write_text(
        "# yaml-language-server: $schema=my_tests_schema.json\n"
        "name: my_tests\n"
        "cases:\n"
        "- name: test_1\n  inputs: hello\n  expected_output: HELLO\n"
        "- name: test_2\n  inputs:\n    question: What is the capital of France?\n"
        "  metadata: {difficulty: easy}\n"
        "  evaluators:\n  - Contains:\n      value: Paris\n"
        "evaluators:\n- IsInstance: str\n- EqualsExpected\n"
    )
    ds = load_dataset(p)
    one, two = ds.cases
    assert ds.name == "my_tests" and one.id == "test_1" and one.input == "hello"
    assert one.expected == "HELLO" and one.metadata["match"] == "exact"
    assert two.input == "What is the capital of France?" and two.expected == "Paris"
    assert two.metadata["difficulty"] == "easy" and "Contains" in two.metadata["evaluators"]


def test_variants_of() -> None:
    assert [v.name for v in variants_of(["a", "b"], [])] == ["a", "b"]
    assert [(v.agent, v.model) for v in variants_of(["a"], ["m1", "m2"])] == [
        ("a", "m1"),
        ("a", "m2"),
    ]
    assert variants_of([], ["m"])[0].model == "m"
    with pytest.raises(ValueError):
        variants_of(["a", "b", "c"], ["m1", "m2"])
    with pytest.raises(ValueError):
        variants_of(["a", "a"], [])


# ------------------------------------------------------------------ recordings (issue #40)


def _recording():
    from activities.evals.contracts import RecordedCall, Recording

    return Recording(
        calls=[
            RecordedCall(name="read_file", arguments={"path": "a"}, result="A1"),
            RecordedCall(name="read_file", arguments={"path": "a"}, result="A2"),
            RecordedCall(name="deploy", arguments={"target": "prod"}, status="rejected"),
            RecordedCall(name="write_file", arguments='{"path": "b", "content": "x"}', result="ok"),
        ]
    )


def test_a_recording_answers_each_call_once_in_order_then_repeats_the_last():
    rec = _recording()
    assert rec.match("read_file", {"path": "a"}, []) == 0
    assert rec.match("read_file", '{"path": "a"}', [0]) == 1  # JSON text matches the object
    assert rec.match("read_file", {"path": "a", "start_line": None}, [0, 1]) == 1  # null: unset
    assert rec.match("read_file", {"path": "b"}, []) is None
    assert rec.match("deploy", {"target": "prod"}, []) is None  # rejected: it never ran
    assert rec.match("write_file", {"content": "x", "path": "b"}, []) == 3


def test_left_recording_names_the_first_call_that_differs():
    from activities.evals.scorers import left_recording, recording_match

    rec = _recording()
    calls = [{"name": c.name, "arguments": c.arguments, "turn": 1} for c in rec.calls]
    assert left_recording(rec, RunFacts(status="completed", tool_calls=calls)) is None
    off = [*calls[:2], {"name": "deploy", "arguments": {"target": "dev"}, "turn": 2}]
    where = left_recording(rec, RunFacts(status="completed", tool_calls=off))
    assert where is not None and where.startswith("left the recording at call 3 (turn 2): deploy(")
    short = left_recording(rec, RunFacts(status="completed", tool_calls=calls[:1]))
    assert (
        short == 'left the recording after call 1: stopped, recorded read_file({"path": "a"}) next'
    )
    case = Case(id="c", input="x", recording=rec)
    score = recording_match(case, RunFacts(status="completed", tool_calls=off))
    assert score.passed is False and score.value == 0.5
    assert [s.name for s in score_run(case, RunFacts(status="completed"), ScorerConfig())][0] == (
        "recording"
    )


def test_a_replayed_approval_is_decided_as_recorded():
    from workflows.eval_suite import as_recorded

    rec = _recording()
    assert as_recorded(rec, "deploy", {"target": "prod"}).decision == "reject"  # type: ignore[union-attr]
    assert as_recorded(rec, "write_file", {"path": "b", "content": "x"}).decision == "approve"  # type: ignore[union-attr]
    assert as_recorded(rec, "deploy", {"target": "dev"}) is None  # not recorded: the dataset's
    assert as_recorded(None, "deploy", {}) is None


def test_the_printed_report_says_where_runs_left_the_recording(capsys):
    from activities.evals.contracts import Score
    from workers.cli.evals import print_report

    where = "left the recording at call 2 (turn 2): write_file(...), recorded write_file(...)"
    records = [
        RunRecord(
            case_id="run-1",
            variant=v,
            repeat=0,
            run_id=f"s.run-1.{v}.0",
            status="completed",
            passed=ok,
            scores=[Score(name="recording", passed=ok, detail="" if ok else where)],
        )
        for v, ok in (("a", True), ("b", False))
    ]
    prog = SuiteProgress(
        suite_id="s",
        dataset="captured",
        variants=[Variant(name="a", agent="a"), Variant(name="b", agent="b")],
        repeat=1,
        total=2,
        records=records,
        done=True,
    )
    report = build_report(prog)
    assert report["variants"]["a"]["cases"]["run-1"]["left_recording"] == []
    assert report["variants"]["b"]["cases"]["run-1"]["left_recording"] == [where]
    print_report(report, as_json=False)
    printed = " ".join(capsys.readouterr().out.split())
    assert (
        "where the run left the recording" in printed and "left the recording at call 2" in printed
    )
