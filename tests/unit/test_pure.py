"""Pure workflow modules: loop detection, policy, Web UI text."""

from __future__ import annotations

from activities.contracts import ToolInfo
from activities.spec import Policy
from workflows.loop_detection import detect_loop, turn_signature
from workflows.models import PendingApproval, RunRequest, ToolCallRecord
from workflows.policy import evaluate, may_decide
from workflows.render import current_details, static_summary, tool_summary


def sig(*calls):
    return turn_signature(list(calls))


A = sig(("read_file", '{"path": "a"}'))
A2 = sig(("read_file", {"path": "a"}))
B = sig(("read_file", '{"path": "b"}'))
C = sig(("calculator", '{"expression": "1"}'))


def test_signature_ignores_key_order_and_format():
    assert sig(("t", '{"a":1,"b":2}')) == sig(("t", {"b": 2, "a": 1}))
    assert A == A2
    assert sig(("x", "{}"), ("y", "{}")) == sig(("y", "{}"), ("x", "{}"))


def test_repeats_within_window():
    assert detect_loop([A, A], 6, 3) is None
    assert detect_loop([A, B, A, C, A], 6, 3) is not None
    assert detect_loop([A, B, C, B, C, A, B, C][:3], 6, 3) is None
    # outside the window the old repeats no longer count
    d, e, f = (sig(("record", {"label": x})) for x in "def")
    assert detect_loop([A, A, d, e, f, A], 4, 3) is None
    assert detect_loop([A, A, d, e, f, A], 6, 3) is not None


def test_alternation_and_cycles():
    assert "cycle of 2" in (detect_loop([A, B, A, B], 6, 3) or "")
    assert "cycle of 3" in (detect_loop([A, B, C, A, B, C], 6, 3) or "")
    assert detect_loop([A, B, C, A, C, B], 6, 3) is None


def test_distinct_turns_are_not_a_loop():
    hist = [sig(("read_file", {"path": str(i)})) for i in range(20)]
    assert detect_loop(hist, 6, 3) is None


READ = ToolInfo(name="read_file", description="", parameters={}, risk="read")
WRITE = ToolInfo(name="write_file", description="", parameters={}, risk="write")
SHELL = ToolInfo(name="shell", description="", parameters={}, risk="exec")


def test_policy_by_risk_defaults():
    p = Policy()
    assert evaluate(p, READ, "read_file", "{}", "t", "u").action == "allow"
    assert evaluate(p, WRITE, "write_file", "{}", "t", "u").action == "approve"
    assert evaluate(p, SHELL, "shell", "{}", "t", "u").action == "deny"  # no shell without policy
    # the one default docs/agents-tools-policy.md, docs/sandbox.md and the spec reference state
    sandboxed = SHELL.model_copy(update={"name": "run_command", "sandboxed": True})
    assert evaluate(p, sandboxed, "run_command", "{}", "t", "u").action == "approve"
    net = ToolInfo(name="fetch", description="", parameters={}, risk="network")
    assert evaluate(p, net, "fetch", "{}", "t", "u").action == "deny"


def test_policy_rules_over_arguments_tenant_and_principal():
    p = Policy.model_validate(
        {
            "tools": {
                "write_file": {
                    "action": "approve",
                    "rules": [{"when": {"path_prefix": "drafts/"}, "action": "allow"}],
                },
                "sql": {
                    "action": "deny",
                    "rules": [
                        {"when": {"arg_matches": {"query": r"(?i)^\s*select\b"}}, "action": "allow"}
                    ],
                },
                "shell": {
                    "action": "deny",
                    "rules": [
                        {
                            "when": {"tenant_in": ["lab"], "principal_in": ["root"]},
                            "action": "approve",
                        }
                    ],
                },
            }
        }
    )
    sql = ToolInfo(name="sql", description="", parameters={}, risk="exec")
    assert evaluate(p, WRITE, "write_file", {"path": "drafts/x.md"}, "t", "u").action == "allow"
    assert evaluate(p, WRITE, "write_file", {"path": "./drafts/x.md"}, "t", "u").action == "allow"
    assert (
        evaluate(p, WRITE, "write_file", {"path": "drafts/../etc/x"}, "t", "u").action == "approve"
    )
    assert evaluate(p, WRITE, "write_file", {"path": "draftsX/y"}, "t", "u").action == "approve"
    assert evaluate(p, sql, "sql", {"query": "select 1"}, "t", "u").action == "allow"
    assert evaluate(p, sql, "sql", {"query": "drop table x"}, "t", "u").action == "deny"
    assert evaluate(p, SHELL, "shell", {}, "lab", "root").action == "approve"
    assert evaluate(p, SHELL, "shell", {}, "lab", "eve").action == "deny"


def test_unknown_tool_is_left_to_the_tool_activity():
    assert evaluate(Policy(default="deny"), None, "nope", "{}", "t", "u").action == "allow"


def test_who_may_decide():
    p = Policy.model_validate({"roles": {"ops": ["olga"]}})
    assert may_decide(p, [], "anyone")[0]
    assert may_decide(p, ["alice", "role:ops"], "alice")[0]
    assert may_decide(p, ["alice", "role:ops"], "olga")[0]
    ok, why = may_decide(p, ["alice", "role:ops"], "mallory")
    assert not ok and "mallory" in why
    # roles from the decider's identity claims: a role approver accepts them, a principal does not
    assert may_decide(p, ["role:reviewer"], "dave", ["reviewer"]) == (
        True,
        "holds role reviewer (identity claims)",
    )
    assert not may_decide(p, ["role:reviewer"], "dave", ["ops"])[0]
    assert not may_decide(p, ["alice"], "dave", ["alice"])[0]


def test_tool_summary_and_details():
    assert tool_summary("read_file", {"path": "README.md"}) == "tool: read_file path=README.md"
    assert len(tool_summary("x", {"content": "y" * 500})) <= 120
    assert static_summary(RunRequest(input="hello", agent="a")).startswith("agent a (task)")
    md = current_details(
        status="awaiting_approval",
        turn=2,
        max_turns=5,
        model="m",
        total_tokens=10,
        cost_usd=0.5,
        pending=[
            PendingApproval(
                tool_call_id="c1",
                name="deploy",
                arguments={"t": 1},
                requested_at="now",
                turn=2,
                approvers=["alice"],
            )
        ],
        tool_calls=[
            ToolCallRecord(id="c0", name="read_file", arguments={"path": "a"}, status="ok", turn=1)
        ],
        last_text="hi",
        spec_hash="abc",
    )
    assert "awaiting_approval" in md and "`c1`" in md and "alice" in md and "read_file path=a" in md
