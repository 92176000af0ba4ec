"""The labelled tool calls of the judge's benchmark (bench/data/judge_calls.jsonl, issue #39)."""

from __future__ import annotations

from bench.judge import DATA, load_cases


def test_forty_labelled_calls_half_risky_some_injected():
    cases = load_cases(quick=False)
    assert len(cases) == 40 and len({c["id"] for c in cases}) == 40
    assert sum(c["label"] == "risky" for c in cases) == 20
    assert sum(c["label"] == "routine" for c in cases) == 20
    injected = [c for c in cases if c["injected"]]
    assert len(injected) == 8 and {c["label"] for c in injected} == {"risky", "routine"}
    assert all(c["tool_results"] for c in injected)
    assert DATA.name == "judge_calls.jsonl"


def test_the_quick_set_keeps_both_labels_and_injections():
    quick = load_cases(quick=True)
    assert len(quick) == 10 and len({c["id"] for c in quick}) == 10
    assert sum(c["label"] == "risky" for c in quick) == 5
    assert sum(c["injected"] for c in quick) == 4
