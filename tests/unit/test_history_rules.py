"""workers/history/_rules.py: the workflow's rules as the audit applies them, without a server."""

import pytest
from temporalio.api.failure.v1 import ApplicationFailureInfo, Failure, TimeoutFailureInfo

from activities.spec import Policy
from workers.history._entries import AskedToolCall
from workers.history._rules import (
    decision_problem,
    failure_text,
    signal_verdict,
    status_after_decision,
    status_after_policy,
    tool_failure_status,
)
from workflows.policy import PolicyDecision


def _app(message: str, type_: str = "RuntimeError", cause: Failure | None = None) -> Failure:
    f = Failure(message=message, application_failure_info=ApplicationFailureInfo(type=type_))
    if cause is not None:
        f.cause.CopyFrom(cause)
    return f


def _activity_failure(cause: Failure) -> Failure:
    f = Failure(message="Activity task failed")
    f.cause.CopyFrom(cause)
    return f


def test_timeouts_are_read_from_the_failure_structure():
    start_to_close = Failure(message="activity StartToClose timeout")
    start_to_close.timeout_failure_info.CopyFrom(TimeoutFailureInfo())
    assert tool_failure_status(False, _activity_failure(start_to_close)) == "timed_out"
    assert tool_failure_status(True, Failure()) == "timed_out"  # ActivityTaskTimedOut


def test_a_message_that_mentions_a_timeout_is_not_a_timeout():
    failure = _activity_failure(_app("bad config: timeout must be positive", "ValueError"))
    assert tool_failure_status(False, failure) == "error"
    own = _app("read timed out", "TimeoutError")  # the tool's own error, not Temporal's timeout
    assert tool_failure_status(False, _activity_failure(own)) == "error"
    assert tool_failure_status(False, Failure(message="boom")) == "error"


def test_failure_text_joins_the_first_five_messages_of_the_chain():
    chain = _app("e", cause=_app("", cause=_app("f", cause=_app("g"))))
    for m in "dcba":
        chain = _app(m, cause=chain)
    assert failure_text(chain) == "a: b: c: d: e"
    assert failure_text(Failure()) == "failed"


POLICY = Policy(approvers=["alice", "role:ops"], roles={"ops": ["olga"]})


@pytest.mark.parametrize(
    ("call_id", "principal", "known", "expected"),
    [
        ("c1", "alice", True, None),
        ("c1", "olga", True, None),
        ("c2", "alice", True, "tool call c2 was already decided (reject)"),
        ("c3", "alice", True, "tool call c3 is not waiting for approval"),
        ("c9", "alice", False, "tool call c9 is unknown"),
    ],
)
def test_decision_problem(call_id, principal, known, expected):
    got = decision_problem(
        call_id,
        principal,
        decided={"c2": "reject"},
        waiting={"c1": ["alice", "role:ops"], "c2": ["alice"]},
        known={"c1", "c2", "c3"} if known else {"c1", "c2", "c3"} - {call_id},
        policy=POLICY,
    )
    assert got == expected


def test_a_principal_who_is_not_an_approver_is_refused():
    why = decision_problem(
        "c1", "mallory", decided={}, waiting={"c1": ["alice"]}, known={"c1"}, policy=POLICY
    )
    assert why and "mallory" in why


def test_no_pinned_policy_means_nothing_waits():
    got = decision_problem("c1", "alice", decided={}, waiting={"c1": []}, known={"c1"}, policy=None)
    assert got == "tool call c1 is not waiting for approval"


def test_statuses_come_from_the_workflows_settlement():
    call = AskedToolCall(id="c1", name="deploy", arguments='{"target": "eu"}')
    allow = PolicyDecision(action="allow", reason="read-only tool")
    deny = PolicyDecision(action="deny", reason="no")
    approve = PolicyDecision(action="approve", reason="writes", approvers=["alice"])
    got = [status_after_policy(call, d, 1) for d in (allow, deny, approve)]
    assert got == [
        ("pending", {"target": "eu"}),
        ("denied", {"target": "eu"}),
        ("awaiting_approval", {"target": "eu"}),
    ]
    bad = AskedToolCall(id="c2", name="deploy", arguments="{not json")
    assert status_after_policy(bad, allow, 1) == ("pending", "{not json")
    at = "2026-11-23T00:00:00+00:00"
    assert [status_after_decision(d, "alice", at) for d in ("approve", "reject", "timeout")] == [
        "approved",
        "rejected",
        "timed_out",
    ]


@pytest.mark.parametrize(
    ("name", "interrupted", "paused", "budget", "expected"),
    [
        ("interrupt", False, False, False, (True, None)),
        ("interrupt", True, False, False, (False, "already interrupted")),
        ("pause", False, True, False, (False, "already paused")),
        ("resume", False, False, False, (False, "not paused")),
        ("resume", False, True, False, (True, None)),
        ("pause", False, True, True, (None, None)),  # a budget pause is not in the history
        ("send_message", False, False, False, (True, None)),
        ("no_such_signal", False, False, False, (None, None)),
    ],
)
def test_signal_verdict(name, interrupted, paused, budget, expected):
    got = signal_verdict(name, interrupted=interrupted, paused=paused, budget_may_pause=budget)
    assert got == expected
