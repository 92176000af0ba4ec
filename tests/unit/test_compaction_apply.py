"""Compaction applied (workflows/compaction.py): a summary in place of the dropped history, the
summary request, truncating tool results."""

from __future__ import annotations

import copy

import pytest

from tests.support.transcripts import Msg, asst, calls, plan_for, result, sys_, user
from workflows.compaction import (
    SUMMARY_PREFIX,
    CompactionPlan,
    summary_request,
    truncate_tool_results,
)

# --- apply and summaries --------------------------------------------------------------------


def _sample() -> tuple[list[Msg], CompactionPlan]:
    msgs = [sys_(), user("task"), asst("old"), calls("a"), result("a", "old result"), user("now")]
    plan = plan_for(msgs, [10, 10, 50, 10, 50, 10], 100)
    assert plan is not None and plan.dropped == [2, 3, 4]
    return msgs, plan


def test_apply_without_summary() -> None:
    msgs, plan = _sample()
    out = plan.apply(msgs)
    assert out == [msgs[0], msgs[1], msgs[5]]
    out[0]["content"] = "changed"
    assert msgs[0]["content"] == "You are an agent."


def test_apply_inserts_summary_where_history_was() -> None:
    msgs, plan = _sample()
    out = plan.apply(msgs, summary="  Read a; it said old result.\n")
    assert [m["role"] for m in out] == ["system", "user", "user", "user"]
    assert out[2] == {"role": "user", "content": SUMMARY_PREFIX + "Read a; it said old result."}
    assert out[3]["content"] == "now"


def test_apply_ignores_summary_when_nothing_dropped() -> None:
    msgs = [sys_(), user("task")]
    plan = plan_for(msgs, [60, 60], 100)
    assert plan is not None and plan.dropped == [] and not plan.fits
    assert plan.apply(msgs, summary="s") == msgs


def test_apply_rejects_other_transcript() -> None:
    msgs, plan = _sample()
    with pytest.raises(ValueError, match="plan is for 6 messages"):
        plan.apply(msgs[:-1])


def test_summary_request_renders_dropped() -> None:
    msgs, plan = _sample()
    req = summary_request([msgs[i] for i in plan.dropped])
    assert [m["role"] for m in req] == ["system", "user"]
    assert "summar" in req[0]["content"].lower()
    body = req[1]["content"]
    assert "[assistant]\nold" in body
    assert "[assistant calls tool read_file (a)]" in body
    assert "[tool result (a)]\nold result" in body
    assert "task" not in body  # only what was dropped


def test_summary_request_is_capped() -> None:
    huge = [result("a", "x" * 50_000), asst("y" * 50_000)] * 10
    req = summary_request(huge, max_chars=5_000, per_message_chars=1_000)
    body = req[1]["content"]
    assert len(body) < 5_300
    assert "characters omitted" in body
    assert summary_request([])[1]["content"].endswith("(nothing)\n</conversation>")


# --- truncation -----------------------------------------------------------------------------


def test_truncate_tool_results() -> None:
    msgs = [user("u" * 100), calls("a"), result("a", "r" * 100), result("b", "short")]
    before = copy.deepcopy(msgs)
    out = truncate_tool_results(msgs, 10)
    assert msgs == before  # input untouched
    assert out[0] == msgs[0] and out[1] == msgs[1] and out[3] == msgs[3]
    assert out[2]["content"] == "r" * 10 + "\n[... truncated 90 characters]"
    assert out[2]["tool_call_id"] == "a"
    with pytest.raises(ValueError):
        truncate_tool_results(msgs, -1)
