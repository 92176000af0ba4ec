"""Temporal Cloud actions counted from stored histories (workers.history.billable_actions), and
printed by the audit."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import WorkflowHistory

from workers.history import audit, billable_actions, render_audit_text

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def _count(name: str) -> dict[str, int]:
    path = HISTORIES / name
    return billable_actions(
        list(WorkflowHistory.from_json("x", json.loads(path.read_text())).events)
    )


def test_a_tool_run_of_revision_5_has_no_timer_and_one_action_per_marker_task():
    # hist-tools: three tools in parallel (two local, one an activity), then list_files, the answer
    got = _count("v7/tools.json")
    assert got == {
        "workflow_started": 1,
        "markers": 3,  # spec.resolve with the patches' markers; each turn's local tools
        "activity_attempt": 4,  # 3 model steps and the `record` tool
        "search_attribute_upsert": 1,  # the final one: the client set the rest at start
        "total": 9,
    }


def test_local_tools_riding_the_next_model_step_pay_no_marker_action():
    # the same run from patch tools-in-model-step: list_files (alone in its turn) rides the last
    # model step; the first turn mixes local tools with `record` (an activity), so its local ones
    # stay local activities (workflows/model_step.py, ToolsFirst)
    before, got = _count("v7/tools.json"), _count("tools.json")
    assert got == {
        "workflow_started": 1,
        "markers": 2,  # spec.resolve with the patches' markers; the first turn's local tools
        "activity_attempt": 4,  # 3 model steps and the `record` tool
        "search_attribute_upsert": 1,
        "total": 8,
    }
    assert before["total"] == got["total"] + 1


def test_revision_4_paid_one_more_action_for_its_deadline_timer():
    before, after = _count("v6/tools.json"), _count("v7/tools.json")
    assert before["timer_started"] == 1 and "timer_started" not in after
    assert before["total"] == after["total"] + 1


def test_signals_updates_and_child_runs_are_counted():
    got = _count("subagents.json")
    assert got["child_workflow"] == 6  # three children, two actions each
    assert got["signal"] >= 1 and got["total"] == sum(v for k, v in got.items() if k != "total")


def test_the_audit_counts_the_actions_of_the_run():
    history = WorkflowHistory.from_json(
        "hist-tools", json.loads((HISTORIES / "tools.json").read_text())
    )
    report = audit(history)
    assert report.actions == _count("tools.json")
    assert "Temporal Cloud actions: 8 (4 activity_attempt, 2 markers, " in render_audit_text(report)
