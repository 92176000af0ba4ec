"""The console's list filters, shown statuses and controls by status (no server needed)."""

from __future__ import annotations

import pytest

from workers import client as rc
from workers.console.run_view import controls, shown_status, status_filter
from workers.console.runs import MAX_FILTER_CHARS, list_filter
from workflows.models import RunRequest


def test_a_closed_run_offers_no_control_and_resume_only_when_paused():
    assert (
        controls(closed=True, status="awaiting_approval", paused=True, pending=2, worker=True) == []
    )
    assert controls(closed=False, status="running", paused=False, pending=0, worker=True) == [
        "interrupt",
        "message",
        "pause",
    ]
    paused = controls(closed=False, status="running", paused=True, pending=0, worker=True)
    assert "resume" in paused and "pause" not in paused
    assert "resume" in controls(
        closed=False, status="paused", paused=False, pending=0, worker=False
    )
    # approve / reject only for pending approvals, and only with a worker to take the update
    assert "decide" in controls(
        closed=False, status="awaiting_approval", paused=False, pending=1, worker=True
    )
    assert "decide" not in controls(
        closed=False, status="awaiting_approval", paused=False, pending=1, worker=False
    )
    assert "decide" not in controls(
        closed=False, status="running", paused=False, pending=0, worker=True
    )


def test_a_run_temporal_closed_shows_that_not_its_last_live_status():
    assert shown_status("running", "awaiting_approval") == "awaiting_approval"
    assert shown_status("running", None) == "running"
    assert shown_status("completed", "max_turns") == "max_turns"
    assert shown_status("terminated", "awaiting_approval") == "terminated"
    assert shown_status("completed", "running") == "completed"
    assert shown_status("failed", "running") == "failed"


def test_list_filters_are_quoted_and_children_are_listed_under_their_parent():
    q = list_filter({"agent": "a'b", "principal": "alice", "status": "paused"})
    assert "AgentName = 'a\\'b'" in q and "PrincipalId = 'alice'" in q
    assert "AgentStatus = 'paused' AND ExecutionStatus = 'Running'" in q
    assert q.endswith("ParentWorkflowId IS NULL AND ExecutionStatus != 'ContinuedAsNew'")
    assert "ParentWorkflowId = 'suite-1'" in list_filter({"parent": "suite-1"})
    assert "ExecutionStatus = 'Terminated'" in list_filter({"status": "terminated"})
    assert "ExecutionStatus != 'Running'" in status_filter("completed")
    with pytest.raises(ValueError, match="status must be one of"):
        list_filter({"status": "x' OR 'a'='a"})
    with pytest.raises(ValueError, match="agent is longer"):
        list_filter({"agent": "a" * (MAX_FILTER_CHARS + 1)})


def test_the_memo_keeps_the_start_of_the_request():
    long = RunRequest(input="x" * 1000, mode="chat")
    memo = rc.request_memo(long)
    assert len(memo["input"]) == rc.MEMO_INPUT_CHARS and memo["input"].endswith("…")
    assert memo["mode"] == "chat"
    assert rc.request_memo(RunRequest(input="hi"))["input"] == "hi"
