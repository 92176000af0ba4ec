"""The turn as pure data (workflows/turn.py) and the views of the run state (workflows/state.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from temporalio.api.failure.v1 import ApplicationFailureInfo, Failure, TimeoutFailureInfo
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from activities.contracts import ModelReply, ToolCallRequest, ToolInfo, Usage
from activities.spec import AgentSpec, Limits, PinnedSpec, Policy
from workers.history import load_history_file
from workflows import state, turn
from workflows.models import (
    Decision,
    MessageSignal,
    PendingApproval,
    RunData,
    RunRequest,
    ToolCallRecord,
)
from workflows.policy import PolicyDecision
from workflows.run_context import cause_message

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def data(**kw) -> RunData:
    return RunData(started_at=T0, req=RunRequest(input="hi"), **kw)


def pinned(**limits) -> PinnedSpec:
    spec = AgentSpec(name="default", model="m", limits=Limits(**limits))
    tools = [ToolInfo(name="read_file", description="read", parameters={"type": "object"})]
    return PinnedSpec(spec=spec, tools=tools, spec_hash="ab" * 32, source="agents.yml")


def reply(*calls: tuple[str, str]) -> ModelReply:
    tool_calls = [
        ToolCallRequest(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls)
    ]
    return ModelReply(content=None if calls else "the answer", tool_calls=tool_calls)


# ------------------------------------------------------------------ what comes next


def test_before_model_stops_at_max_turns():
    assert turn.before_model(data(turn=2), Limits(max_turns=3)) == turn.CallModel()
    assert turn.before_model(data(turn=3), Limits(max_turns=3)) == turn.Finish(
        "max_turns", "reached max_turns=3"
    )


def test_a_reply_without_tool_calls_finishes_a_task_and_waits_in_a_chat():
    assert turn.after_reply(data(), reply(), Limits()) == turn.Finish(
        "completed", "the model answered"
    )
    chat = data()
    chat.req = RunRequest(input="hi", mode="chat")
    assert turn.after_reply(chat, reply(), Limits()) == turn.WaitForMessage()


def test_tool_calls_run_unless_they_close_a_loop():
    r = reply(("read_file", '{"path": "a"}'))
    nxt = turn.after_reply(data(), r, Limits())
    assert isinstance(nxt, turn.RunTools) and [c.id for c in nxt.calls] == ["c0"]
    assert nxt.signature == (("read_file", '{"path":"a"}'),)
    looping = data(signatures=[nxt.signature, nxt.signature])
    stop = turn.after_reply(looping, r, Limits(loop_repeats=3))
    assert isinstance(stop, turn.Finish) and stop.status == "loop_detected"
    assert "read_file" in stop.reason


def test_an_unparsable_reply_is_told_to_the_model_then_fails_the_run():
    assert turn.after_parse_failure(1, 2, "bad") == turn.TellModel(turn.PARSE_FAILURE_NOTE)
    assert turn.after_parse_failure(3, 2, "bad") == turn.Finish(
        "failed", "the model's output could not be parsed", "bad"
    )


def test_budget_pauses_or_stops_after_the_tools():
    over = data(usage=Usage(total_tokens=100, cost_usd=0.5), max_total_tokens=100)
    assert turn.budget_exceeded(over) == "used 100 tokens of a budget of 100"
    assert turn.after_tools(over, Limits()) == turn.Finish(
        "budget_exceeded", "used 100 tokens of a budget of 100"
    )
    assert isinstance(turn.after_tools(over, Limits(on_budget="pause")), turn.PauseForBudget)
    costly = data(usage=Usage(cost_usd=0.5), max_cost_usd=0.25)
    assert turn.budget_exceeded(costly) == "cost 0.500000 USD of a budget of 0.25 USD"
    assert turn.after_tools(data(max_total_tokens=100), Limits()) == turn.CallModel()


@pytest.mark.parametrize(
    "turn_no, every, suggested, size, events, expected",
    [
        (4, 2, False, 0, 0, True),
        (3, 2, False, 0, 0, False),
        (3, None, True, 0, 0, True),
        (3, None, False, 2 * 1024 * 1024, 0, True),
        (3, None, False, 0, 2_000, True),
        (3, None, False, 1024, 100, False),
    ],
)
def test_continue_as_new_every_n_turns_on_suggestion_or_at_thresholds(
    turn_no, every, suggested, size, events, expected
):
    limits = Limits(continue_as_new_every_turns=every)
    assert turn.should_continue_as_new(turn_no, limits, suggested, size, events) is expected


def test_tokens_are_counted_only_when_the_upper_bound_may_exceed_the_budget():
    tools = pinned().tools
    d = data(messages=[{"role": "user", "content": "x" * 400}])
    assert not turn.needs_token_count(d, tools, budget=10_000)
    assert turn.needs_token_count(d, tools, budget=50)
    counted = data(messages=d.transcript.messages, token_counts=[3], tools_tokens=5)
    assert not turn.needs_token_count(counted, tools, budget=8)
    assert turn.needs_token_count(counted, tools, budget=7)


# ------------------------------------------------------------------ how a tool call settles


def test_the_policy_settles_a_denied_call_and_keeps_the_others_pending():
    call = ToolCallRequest(id="c1", name="deploy", arguments='{"target": "prod"}')
    rec, settled = turn.settle_by_policy(call, PolicyDecision(action="deny", reason="no"), 2)
    assert settled == turn.Settled("denied", "Tool call denied by policy: no. Do not retry it.")
    assert rec.arguments == {"target": "prod"} and rec.turn == 2 and rec.policy == "deny"
    bad = ToolCallRequest(id="c2", name="deploy", arguments="{not json")
    rec, settled = turn.settle_by_policy(bad, PolicyDecision(action="approve", reason="w"), 1)
    assert settled is None and rec.status == "pending" and rec.arguments == "{not json"


def _verdict(
    decision: Literal["approve", "reject", "timeout"], comment: str | None = None
) -> Decision:
    return Decision(tool_call_id="c", decision=decision, principal_id="p", at="t", comment=comment)


def test_a_person_s_verdict_settles_the_call_with_the_text_the_model_is_told():
    assert turn.settle_by_verdict(_verdict("approve")) is None
    assert turn.settle_by_verdict(_verdict("timeout")) == turn.Settled(
        "timed_out", turn.APPROVAL_TIMED_OUT
    )
    assert turn.settle_by_verdict(_verdict("reject", "too risky")) == turn.Settled(
        "rejected", "A person rejected this tool call; it was not run. Reason: too risky"
    )
    settled = turn.settle_by_verdict(None)
    assert settled is not None and settled.text.endswith("Reason: no reason given")


def test_a_failed_tool_activity_settles_as_cancelled_timed_out_or_error():
    assert turn.settle_failure(False, True, "m", 3).status == "cancelled"
    timed = turn.settle_failure(True, False, "activity StartToClose timeout", 3, 30.0)
    assert timed == turn.Settled(
        "timed_out",
        "The tool did not finish within its time limit (30 s) and was given up after 3 "
        "attempt(s): activity StartToClose timeout",
    )
    failed = turn.settle_failure(False, False, "RuntimeError: boom", 2, 30.0)
    assert failed.text == "The tool failed and was given up after 2 attempt(s): RuntimeError: boom"
    # a tool whose own message says "timed out" is an error, not a timeout (structural now)
    assert turn.settle_failure(False, False, "upstream timed out", 1).status == "error"


def test_a_timeout_repeated_down_the_cause_chain_is_said_once():
    inner = TimeoutError(
        "activity StartToClose timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[]
    )
    outer = TimeoutError(
        "activity StartToClose timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[]
    )
    outer.__cause__ = inner
    e = ActivityError(
        "activity error",
        scheduled_event_id=5,
        started_event_id=6,
        identity="w",
        activity_type="tool.invoke",
        activity_id="1",
        retry_state=None,
    )
    e.__cause__ = outer
    assert cause_message(e) == "activity StartToClose timeout"
    outer.__cause__ = ApplicationError("boom")
    assert cause_message(e) == "activity StartToClose timeout: boom"


def test_timeouts_are_recognised_by_their_type_not_their_message():
    timeout = TimeoutError("t", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    assert turn.is_timeout_error(timeout)
    wrapped = ApplicationError("outer")
    wrapped.__cause__ = timeout  # the SDK's ``cause`` is the chained exception
    assert turn.is_timeout_error(wrapped)
    assert not turn.is_timeout_error(ApplicationError("the request timed out"))
    assert not turn.is_timeout_error(None)
    nested = Failure(
        message="activity failed",
        application_failure_info=ApplicationFailureInfo(),
        cause=Failure(message="timeout", timeout_failure_info=TimeoutFailureInfo()),
    )
    assert turn.is_timeout_failure(nested)
    assert not turn.is_timeout_failure(
        Failure(message="timed out", application_failure_info=ApplicationFailureInfo())
    )
    assert not turn.is_timeout_failure(None)


def test_why_a_decision_cannot_be_taken():
    policy = Policy(approvers=["alice"])
    kw: dict[str, Any] = dict(
        decided={"c1": "approve"}, waiting={"c2": ["alice"]}, known={"c1", "c2", "c3"}
    )
    problem = turn.decision_problem
    assert (
        problem("c1", "alice", policy=policy, **kw) == "tool call c1 was already decided (approve)"
    )
    assert problem("c3", "alice", policy=policy, **kw) == "tool call c3 is not waiting for approval"
    assert problem("c9", "alice", policy=policy, **kw) == "tool call c9 is unknown"
    assert problem("c2", "alice", policy=policy, **kw) is None
    assert "bob" in (problem("c2", "bob", policy=policy, **kw) or "")


# ------------------------------------------------------------------ views of the run state


def test_state_result_and_details_are_views_of_one_run_state():
    rec = ToolCallRecord(id="c1", name="read_file", status="ok", turn=1)
    pending = PendingApproval(
        tool_call_id="c2", name="deploy", arguments={}, requested_at="t", turn=1
    )
    d = data(
        pinned=pinned(),
        turn=2,
        tool_calls=[rec],
        output="done",
        pending={"c2": pending},
        status="awaiting_approval",
    )
    st = state.run_state(d)
    assert (st.status, st.turn, st.agent, st.output) == ("awaiting_approval", 2, "default", "done")
    assert st.pending_approvals == [pending] and st.spec_hash == "ab" * 32
    res = state.run_result(d, "completed", "the model answered", None, T0 + timedelta(seconds=2))
    assert (res.status, res.turns, res.duration_ms, res.agent) == (
        "completed",
        2,
        2000.0,
        "default",
    )
    assert res.tool_calls == [rec] and res.stopped_reason == "the model answered"
    md = state.details(d) or ""
    assert "`awaiting_approval`" in md and "`c2`" in md
    assert state.details(data()) is None  # nothing to show before the spec is pinned
    names = [p.key.name for p in state.search_attribute_pairs(d, initial=True)]
    assert names[:3] == ["AgentStatus", "TotalTokens", "CostUsd"] and "SpecHash" in names
    assert len(state.search_attribute_pairs(d, initial=False)) == 3


def test_only_what_outlives_an_execution_is_carried():
    d = data(
        pinned=pinned(),
        inbox=[MessageSignal(content="next")],
        pending={},
        status="running",
        parse_failures=2,
        token_counts=[1, 2],
    )
    carried = json.loads(d.model_dump_json())
    for one_execution in ("req", "status", "pending", "verdicts", "parse_failures", "token_counts"):
        assert one_execution not in carried
    back = RunData.model_validate_json(d.model_dump_json())
    assert (
        back.control.inbox == d.control.inbox
        and back.status == "starting"
        and back.transcript.token_counts == []
    )


@pytest.mark.parametrize("folder", [HISTORIES / "v2", HISTORIES])
def test_the_carry_of_a_stored_history_decodes_as_the_run_state(folder: Path):
    started = load_history_file(folder / "continue_as_new.json").events[0]
    payload = started.workflow_execution_started_event_attributes.input.payloads[0]
    assert payload.metadata["encoding"] == b"json/plain"
    req = RunRequest.model_validate_json(payload.data)
    assert req.carry is not None and req.carry.pinned is not None
    assert req.carry.turn == 4 and req.carry.continued_runs == 2
    assert all(isinstance(s, tuple) for s in req.carry.signatures)


def test_inbound_decoding_says_what_is_wrong_and_who_sent_it():
    from workflows.inbound import Invalid, decode
    from workflows.models import ApproveSignal

    missing = decode(None, ApproveSignal, "signal approve")
    assert isinstance(missing, Invalid) and missing.problem.startswith("signal approve: no payload")
    bad = decode({"tool_call_id": 5, "principal_id": "alice"}, ApproveSignal, "signal approve")
    assert isinstance(bad, Invalid) and bad.principal_id == "alice"
    assert "tool_call_id: Input should be a valid string" in bad.problem
    assert '"tool_call_id", "principal_id"?' in bad.problem
    ok = ApproveSignal(tool_call_id="c1")
    assert decode(ok, ApproveSignal, "x") is ok


def test_unique_call_ids_renames_a_repeated_id_and_keeps_the_rest():
    calls = [
        ToolCallRequest(id="call_0", name="deploy", arguments="{}"),
        ToolCallRequest(id="call_0", name="deploy", arguments="{}"),
        ToolCallRequest(id="fresh", name="record", arguments="{}"),
        ToolCallRequest(id="call_0-2", name="record", arguments="{}"),
    ]
    out = turn.unique_call_ids(calls, taken={"call_0", "call_0-3"})
    assert [c.id for c in out] == ["call_0-2", "call_0-4", "fresh", "call_0-2-2"]
    assert out[2] is calls[2]  # untouched calls are the same objects
    assert turn.unique_call_ids(calls[2:3], taken=set()) == calls[2:3]
