"""Sub-agents' pure half (workflows/child_rules.py): ids, budgets, requests, answers, approvals."""

from __future__ import annotations

from activities.contracts import Usage
from workflows.child_rules import (
    child_answer,
    child_holding,
    child_limits,
    child_request,
    child_workflow_id,
    children_markdown,
    task_of,
    with_child_approvals,
)
from workflows.models import ChildRecord, PendingApproval, RunRequest, RunResult


def test_child_ids_count_per_agent():
    kids = [ChildRecord(run_id="p.reader-1", agent="reader")]
    assert child_workflow_id("p", "reader", kids) == "p.reader-2"
    assert child_workflow_id("p", "writer", kids) == "p.writer-1"


def test_task_argument():
    assert task_of('{"task": " read a.txt "}') == "read a.txt"
    assert task_of({"task": "x"}) == "x"
    assert task_of('{"task": ""}') is None
    assert task_of("not json") is None
    assert task_of({"job": "x"}) is None


def test_budget_share_of_what_is_left():
    used = Usage(total_tokens=400, cost_usd=0.4)
    lim = child_limits(used, 1000, 1.0, 2)
    assert lim.max_total_tokens == 300
    assert lim.max_cost_usd is not None and abs(lim.max_cost_usd - 0.3) < 1e-9
    assert child_limits(used, None, None, 3).max_total_tokens is None
    assert child_limits(Usage(total_tokens=5000), 1000, None, 1).max_total_tokens == 1


def test_child_inherits_tenant_principal_and_spec_file():
    parent = RunRequest(
        agent="boss", input="x", tenant_id="acme", principal_id="alice", spec_file="/s.yml"
    )
    child = child_request(parent, "reader", "read it", child_limits(Usage(), 100, None, 1))
    assert (child.agent, child.input, child.tenant_id, child.principal_id) == (
        "reader",
        "read it",
        "acme",
        "alice",
    )
    assert child.spec_file == "/s.yml" and child.limits.max_total_tokens == 100
    assert child.mode == "task" and child.carry is None


def test_child_answer():
    ok = RunResult(status="completed", output="42")
    assert child_answer("reader", ok) == ("ok", "42")
    bad = RunResult(status="budget_exceeded", output="half", stopped_reason="used 10 tokens")
    status, text = child_answer("reader", bad)
    assert status == "error" and "ended budget_exceeded" in text and "half" in text
    long = RunResult(status="completed", output="x" * 20_000)
    assert child_answer("r", long)[1].endswith("[truncated]")


def test_child_approvals_show_with_run_id_and_are_found():
    own = [PendingApproval(tool_call_id="c1", name="w", arguments={}, requested_at="t", turn=1)]
    theirs = {
        "p.writer-1": [
            PendingApproval(tool_call_id="k1", name="w", arguments={}, requested_at="t", turn=1)
        ]
    }
    shown = with_child_approvals(own, theirs)
    assert [(p.tool_call_id, p.run_id) for p in shown] == [("c1", None), ("k1", "p.writer-1")]
    assert child_holding(theirs, "k1") == "p.writer-1"
    assert child_holding(theirs, "c1") is None


def test_children_markdown_lists_children_and_handoffs():
    kids = [
        ChildRecord(
            run_id="p.reader-1", agent="reader", status="completed", usage=Usage(total_tokens=12)
        )
    ]
    md = children_markdown(kids, ["triage", "reader"])
    assert "| `p.reader-1` | reader | completed | 12 |" in md
    assert "`triage` → `reader`" in md
    assert children_markdown([], []) == ""


def test_the_parent_refuses_only_what_the_childs_approver_list_rules_out():
    from workflows.child_rules import refused_by_child
    from workflows.models import PendingApproval

    def pending(call: str, approvers: list[str]) -> PendingApproval:
        return PendingApproval(
            tool_call_id=call, name="write_file", arguments={}, requested_at="t", turn=1,
            approvers=approvers,
        )  # fmt: skip

    children = {
        "p.writer-1": [pending("c1", ["alice"]), pending("c2", ["alice", "role:ops"])],
        "p.reader-1": [pending("c3", [])],
    }
    assert refused_by_child(children, "c1", "alice") is None
    problem = refused_by_child(children, "c1", "mallory")
    assert problem and "mallory" in problem and "p.writer-1" in problem
    assert refused_by_child(children, "c2", "mallory") is None  # a role: only the child knows
    assert refused_by_child(children, "c3", "mallory") is None  # no approvers: anyone
    assert refused_by_child(children, "c9", "mallory") is None  # not a child's call
