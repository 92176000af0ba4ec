"""The stored ``EvalSuite`` history (tests/record_eval_history.py) replays with the current code."""

from __future__ import annotations

from pathlib import Path

from workers.history import load_history_file, replay_file
from workflows.eval_suite import EvalSuite

HISTORY = Path(__file__).resolve().parents[1] / "histories" / "evals" / "eval_suite.json"


async def test_stored_eval_suite_history_replays() -> None:
    events = load_history_file(HISTORY).events
    children = [
        e for e in events if e.HasField("child_workflow_execution_completed_event_attributes")
    ]
    signals = [
        e
        for e in events
        if e.HasField("signal_external_workflow_execution_initiated_event_attributes")
    ]
    assert len(children) == 4 and len(signals) == 2  # 2 cases x 2 variants; 2 approvals sent
    report = await replay_file(HISTORY, workflows=[EvalSuite])
    assert report.compatible, report.failure
    assert report.events == len(events)
