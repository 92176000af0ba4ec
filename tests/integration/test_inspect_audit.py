"""Auditing runs (``workers.history``: audit): live runs, a tool timeout, a redacted secret and
stored histories, through the API and ``agentctl audit``/``replay``."""

from __future__ import annotations

import json
import secrets
from datetime import datetime
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from typer.testing import CliRunner

from tests.support.cli import agentctl_at
from tests.support.harness import Harness, until_state
from workers import client as rc
from workers import history as ih
from workers.cli import app
from workers.history import billable_actions
from workers.testing.scripted_model import ScriptedModel, text, tool_call, tool_calls
from workflows.models import ApproveSignal, RunState

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = ROOT / "tests" / "histories"
GATED = {
    "default": {
        "policy": {
            "approvers": ["alice", "role:ops"],
            "roles": {"ops": ["olga"]},
            "tools": {"calculator": {"action": "deny", "reason": "no maths today"}},
        }
    }
}


def iso(value: str) -> datetime:
    t = datetime.fromisoformat(value)
    assert t.tzinfo is not None
    return t


# --------------------------------------------------------------------------- live runs


async def test_audit_lists_tool_calls_decisions_and_the_ignored_signal(
    client: Client, tmp_path: Path, dev_server_address: str
):
    model = ScriptedModel(
        [
            tool_calls(
                [
                    ("record", {"label": "allowed"}),
                    ("calculator", {"expression": "1+1"}),
                    ("deploy", {"target": "prod"}),
                    ("deploy", {"target": "eu"}),
                ]
            ),
            text("done"),
        ]
    )
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle = await h.start("audit me", principal_id="carol")
        st = await until_state(handle, lambda s: len(s.pending_approvals) == 2)
        first, second = (p.tool_call_id for p in st.pending_approvals)
        # unauthorised: ignored by the workflow, and recorded with why
        await rc.approve_signal(
            client, handle.id, ApproveSignal(tool_call_id=first, principal_id="mallory")
        )
        await until_state(handle, lambda s: len(s.ignored_signals) == 1)
        await rc.approve_signal(
            client,
            handle.id,
            ApproveSignal(tool_call_id=first, principal_id="olga", arguments={"target": "staging"}),
        )
        await rc.decide(client, handle.id, second, "reject", "alice", reason="freeze week")
        res = await handle.result()
        final: RunState = await handle.query("state", result_type=RunState)
        chain = await ih.fetch_chain(client, handle.id)
        replayed = await ih.replay(client, handle.id)
        cli_audit = await agentctl_at(dev_server_address, "audit", handle.id, "--json")
        cli_text = await agentctl_at(dev_server_address, "audit", handle.id)
        cli_replay = await agentctl_at(dev_server_address, "replay", handle.id)

    assert res.status == "completed"
    a = ih.audit(chain)
    assert a.workflow_id == handle.id and a.status == "completed" and a.chain_complete
    assert (a.agent, a.input, a.principal_id) == ("default", "audit me", "carol")
    assert a.result is not None and a.result.status == "completed"

    # every decision, with who / when / what, and whether it counted
    decisions = a.decisions
    assert [(d.who, d.decision, d.via, d.accepted) for d in decisions] == [
        ("mallory", "approve", "signal", False),
        ("olga", "approve", "signal", True),
        ("alice", "reject", "update", True),
    ]
    ignored = decisions[0]
    assert ignored.tool_call_id == first
    assert ignored.ignored_reason == final.ignored_signals[0].reason  # the workflow's own words
    assert "not among the approvers" in (ignored.ignored_reason or "")
    assert decisions[1].arguments == {"target": "staging"}
    assert decisions[2].comment == "freeze week" and decisions[2].tool_call_id == second
    times = [iso(d.time) for d in decisions]
    assert times == sorted(times)
    [only_ignored] = a.ignored
    assert isinstance(only_ignored, ih.DecisionEntry) and only_ignored.tool_call_id == first
    # the workflow's decisions and the audit's accepted ones agree (who, what, call)
    assert [(d.principal_id, d.decision, d.tool_call_id) for d in final.decisions] == [
        (d.who, d.decision, d.tool_call_id) for d in decisions if d.accepted
    ]

    # every tool call with its status, as the run's result says
    calls = {c.tool_call_id: c for c in a.tool_calls}
    assert {cid: c.status for cid, c in calls.items()} == {c.id: c.status for c in res.tool_calls}
    by_name = {}
    for c in a.tool_calls:
        by_name.setdefault(c.name, []).append(c)
    assert by_name["record"][0].status == "ok" and by_name["record"][0].ran
    assert by_name["record"][0].result_chars == len("recorded allowed")
    assert by_name["calculator"][0].status == "denied" and not by_name["calculator"][0].ran
    assert calls[first].status == "ok" and calls[first].decided_by == "olga"
    assert calls[first].arguments == {"target": "staging"}
    assert calls[first].requested_arguments == {"target": "prod"}
    assert calls[second].status == "rejected" and calls[second].decided_by == "alice"
    assert not calls[second].ran
    assert all(
        c.duration_ms is not None and c.latency_ms is not None for c in a.tool_calls if c.ran
    )
    approvals = [e for e in a.timeline if e.kind == "approval_requested"]
    assert {e.tool_call_id for e in approvals} == {first, second}
    assert approvals[0].approvers == ["alice", "role:ops"]

    # model steps: turn, model, attempts, tokens, latency, the calls it asked for
    steps = a.model_steps
    assert [s.turn for s in steps] == [1, 2]
    assert all(s.model == "scripted" and s.attempts == 1 and s.status == "completed" for s in steps)
    assert all(
        s.prompt_tokens > 0 and s.completion_tokens > 0 and s.latency_ms is not None for s in steps
    )
    assert [c.name for c in steps[0].tool_calls] == ["record", "calculator", "deploy", "deploy"]
    assert steps[1].content == "done" and steps[1].tool_calls == []
    assert sum(s.prompt_tokens for s in steps) == res.usage.prompt_tokens

    end = a.timeline[-1]
    assert end.kind == "run_finished" and end.status == "completed"
    assert end.usage == res.usage and end.stopped_reason == res.stopped_reason
    assert a.timeline[0].kind == "run_started"
    text_out = ih.render_audit_text(a)
    assert "IGNORED: principal 'mallory' is not among the approvers" in text_out
    assert "decided by olga" in text_out and "-> rejected" in text_out
    assert ih.Audit.model_validate_json(a.model_dump_json()) == a

    # agentctl audit --json prints the audit and only that; the text form is readable
    assert cli_audit.returncode == 0, cli_audit.stderr
    parsed = json.loads(cli_audit.stdout)
    assert parsed["workflow_id"] == handle.id
    assert [d["accepted"] for d in parsed["timeline"] if d["kind"] == "decision"] == [
        False,
        True,
        True,
    ]
    assert (
        cli_text.returncode == 0 and "mallory" in cli_text.stdout and "IGNORED" in cli_text.stdout
    )

    # replay of this fresh run: compatible, from the API and the CLI
    assert replayed.compatible and replayed.failure is None
    assert replayed.events == sum(len(x.events) for x in chain)
    assert cli_replay.returncode == 0, cli_replay.stderr
    assert (
        f"compatible: the current code replays {handle.id} ({replayed.events} events)"
        in cli_replay.stdout
    )


async def test_a_tool_timeout_is_audited_as_the_workflow_records_it(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("sleepy", {"seconds": 30}), text("gave up")])
    async with Harness(client, tmp_path, model, agents={"default": {"tools": ["sleepy"]}}) as h:
        handle = await h.start("sleep")
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
    assert [c.status for c in res.tool_calls] == ["timed_out"]  # the workflow's own record
    # Without the result (as while the run is open) the audit derives the status from the
    # activity's failure: a start-to-close timeout (timeoutFailureInfo), not a message.
    last = history.events[-1]
    assert last.HasField("workflow_execution_completed_event_attributes")
    open_run = ih.audit(WorkflowHistory(history.workflow_id, list(history.events)[:-1]))
    (call,) = open_run.tool_calls
    assert (call.name, call.status, call.ran, call.attempts) == ("sleepy", "timed_out", True, 1)
    assert call.error and "timeout" in call.error.lower()
    assert ih.audit(history).tool_calls[0].status == "timed_out"


async def test_a_secret_given_to_a_tool_never_reaches_the_history_or_logs(
    client: Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd,
):
    token = "tok-" + secrets.token_hex(16)
    monkeypatch.setenv("TEST_SECRET_TOKEN", token)
    caplog.set_level("DEBUG")
    model = ScriptedModel([tool_call("echo_secret", {}), text("done")])
    agents = {"default": {"secrets": ["TEST_SECRET_TOKEN"]}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("tell me the token")
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
        transcript = await handle.query("transcript")
    captured = capfd.readouterr()

    assert res.status == "completed"
    assert [c.status for c in res.tool_calls] == ["ok"]
    tool_msg = next(m for m in transcript if m["role"] == "tool")
    assert tool_msg["content"] == "token is [REDACTED]"
    raw = b"".join(ev.SerializeToString() for ev in history.events)  # payloads as raw JSON bytes
    assert b"token is [REDACTED]" in raw  # the redacted result is recorded ...
    assert token.encode() not in raw  # ... the secret is not
    assert token not in history.to_json()
    assert "TEST_SECRET_TOKEN" in history.to_json() or b"TEST_SECRET_TOKEN" in raw  # only its name
    assert all(token not in json.dumps(r.body) for r in model.requests)
    logs = caplog.text + captured.out + captured.err
    assert "echo_secret" in logs  # the tool call was logged ...
    assert token not in logs  # ... without the secret
    a = ih.audit(history)
    assert token not in a.model_dump_json()
    # redacted before it is measured and cut (activities/redaction.py): not even its length leaks
    assert a.tool_calls[0].name == "echo_secret" and a.tool_calls[0].result_chars == len(
        "token is [REDACTED]"
    )


# --------------------------------------------------------------------------- stored histories


def test_audit_of_the_stored_approval_history():
    a = ih.audit(ih.load_history_file(HISTORIES / "approvals.json"))
    assert a.workflow_id == "hist-approvals" and a.agent == "gated" and a.status == "completed"
    assert [(d.who, d.via, d.decision, d.accepted) for d in a.decisions] == [
        ("mallory", "signal", "approve", False),
        ("olga", "signal", "approve", True),
        ("alice", "update", "reject", True),
        ("alice", "signal", "reject", False),
    ]
    assert "not among the approvers" in (a.decisions[0].ignored_reason or "")
    assert "already decided" in (a.decisions[3].ignored_reason or "")
    assert sorted(c.status for c in a.tool_calls) == ["ok", "rejected"]
    ran = next(c for c in a.tool_calls if c.status == "ok")
    assert ran.arguments == {"target": "staging"} and ran.decided_by == "olga"


def test_audit_of_stored_interrupt_and_partial_chain():
    a = ih.audit(ih.load_history_file(HISTORIES / "interrupt.json"))
    assert a.status == "interrupted"
    sig = a.signals
    assert [(s.name, s.who, s.accepted) for s in sig] == [("interrupt", "alice", True)]
    assert a.model_steps[-1].status == "cancelled"  # stopped mid-step
    assert a.model_steps[-1].completed_at is None and a.model_steps[0].status == "completed"
    last = ih.audit(ih.load_history_file(HISTORIES / "continue_as_new.json"))
    assert not last.chain_complete and last.status == "completed"
    started = last.timeline[0]
    assert isinstance(started, ih.RunStartedEntry)
    assert started.continued_from and started.turn == 4


def test_audit_of_a_watched_run_leaves_out_the_stream_signals():
    # recorded at the top level or, once superseded, under v3/
    history = ih.load_history_file(sorted(HISTORIES.rglob("streamed.json"))[0])
    names = {e.workflow_execution_signaled_event_attributes.signal_name for e in history.events}
    assert "__temporal_workflow_stream_publish" in names  # the text deltas reached the run
    a = ih.audit(history)
    assert a.signals == [] and a.status == "completed"
    assert a.result is not None and [s.content for s in a.model_steps][-1] == a.result.output


def test_cli_audit_file_json():
    res = CliRunner().invoke(app, ["audit", "--file", str(HISTORIES / "tools.json"), "--json"])
    assert res.exit_code == 0, res.output
    parsed = ih.Audit.model_validate_json(res.stdout)
    assert [c.name for c in parsed.tool_calls] == [
        "read_file",
        "calculator",
        "record",
        "list_files",
    ]
    assert all(c.status == "ok" for c in parsed.tool_calls)


async def test_local_tool_calls_that_rode_a_model_step_are_audited_as_they_ran(
    client: Client, tmp_path: Path
):
    """read_file (local, allowed) runs inside the next model step's activity; a local tool that
    times out there is settled as a timed-out activity would be (workflows/model_step.py, ToolsFirst)."""
    agents = {"default": {"tools": ["read_file", "calculator", {"name": "sleepy", "local": True}]}}
    model = ScriptedModel(
        [
            tool_calls(
                [("read_file", {"path": "README.md"}), ("calculator", {"expression": "6*7"})]
            ),
            tool_call("sleepy", {"seconds": 30}),
            text("done"),
        ]
    )
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("read and sleep")
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
        transcript = await handle.query("transcript")
    assert res.status == "completed", res.stopped_reason
    assert [(c.name, c.status) for c in res.tool_calls] == [
        ("read_file", "ok"),
        ("calculator", "ok"),
        ("sleepy", "timed_out"),
    ]
    # the model saw every result, in call order, before it was asked again
    tool_msgs = [m for m in transcript if m["role"] == "tool"]
    assert tool_msgs[1]["content"] == "42"
    asked = model.requests[1].body["messages"]
    assert [m["role"] for m in asked[-3:]] == ["assistant", "tool", "tool"]
    assert asked[-2]["content"] == tool_msgs[0]["content"] and tool_msgs[0]["content"]
    assert asked[-1]["content"] == "42"
    assert tool_msgs[2]["content"].startswith("The tool did not finish within its time limit")
    assert "timed out after 1 s" in tool_msgs[2]["content"]
    # no activity or marker of their own: three model steps and the spec's local activity
    kinds = [e.WhichOneof("attributes") for e in history.events]
    assert kinds.count("activity_task_scheduled_event_attributes") == 3
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
    ]
    # the patches (agent-run-v2, -v4, tools-in-model-step, model-arguments) and spec.resolve:
    # one workflow task
    assert markers == ["core_patch"] * 4 + ["core_local_activity"]
    assert billable_actions(list(history.events))["markers"] == 1
    for closed in (history, WorkflowHistory(history.workflow_id, list(history.events)[:-1])):
        a = ih.audit(closed)  # also while the run is open (no result to read)
        calls = {c.name: c for c in a.tool_calls}
        assert all(c.ran and c.attempts == 1 for c in calls.values())
        assert calls["read_file"].status == "ok" and calls["read_file"].result_chars
        assert calls["calculator"].status == "ok" and calls["calculator"].result_chars == 2
        assert calls["sleepy"].status == "timed_out" and "timed out" in (
            calls["sleepy"].error or ""
        )
