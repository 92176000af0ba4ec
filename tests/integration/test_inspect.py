"""See, audit, replay and fork runs: workers/history/ and `agentctl audit|replay|fork`."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import ExternalStorage, StorageDriver, StorageDriverClaim
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from tests.support.harness import Harness, until_state
from workers import client as rc
from workers import history as ih
from workers.cli import app
from workers.testing.env import start_local_env
from workers.testing.scripted_model import ScriptedModel, text, tool_call, tool_calls
from workflows.agent_run import SA_PARENT
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


@pytest_asyncio.fixture(scope="module")
async def plain_env() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server without custom search attributes: runs must work there too (no listing)."""
    e = await start_local_env(search_attributes=[])
    try:
        yield e
    finally:
        await e.shutdown()


async def agentctl(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (in a thread: the worker shares this event loop)."""
    env = {**os.environ, "TEMPORAL_ADDRESS": address, "TEMPORAL_NAMESPACE": "default"}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "workers.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=str(ROOT),
    )


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
        cli_audit = await agentctl(dev_server_address, "audit", handle.id, "--json")
        cli_text = await agentctl(dev_server_address, "audit", handle.id)
        cli_replay = await agentctl(dev_server_address, "replay", handle.id)

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
    assert [e.tool_call_id for e in a.ignored] == [first]
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


async def test_fork_reproduces_the_transcript_up_to_turn_k_and_records_lineage(
    plain_env: WorkflowEnvironment, tmp_path: Path
):
    client = plain_env.client
    dev_server_address = client.service_client.config.target_host
    model = ScriptedModel(
        [
            tool_call("record", {"label": "a"}),
            tool_call("record", {"label": "b"}),
            text("original answer"),
            text("forked answer"),  # the fork at turn 2
            text("hi there"),  # the fork at turn 1 with an edited message and another model
            text("cli fork answer"),  # agentctl fork --turn 3
        ]
    )
    async with Harness(client, tmp_path, model) as h:
        original = await h.start("count to two")
        res = await original.result()
        assert res.status == "completed" and res.turns == 3

        forked = await ih.fork(client, original.id, 2)
        fres = await forked.result()
        fstate: RunState = await forked.query("state", result_type=RunState)

        edited = await ih.fork(client, original.id, 1, message="just say hi", model="other-model")
        eres = await edited.result()

        for bad in (0, 4, -1):
            with pytest.raises(ih.ForkError) as exc:
                await ih.fork(client, original.id, bad)
            assert "1..3" in str(exc.value) and f"turn {bad}" in str(exc.value)
        count_before_cli = model.count
        bad_cli = await agentctl(dev_server_address, "fork", original.id, "--turn", "9")
        assert model.count == count_before_cli  # nothing started
        cli = await agentctl(dev_server_address, "fork", original.id, "--turn", "3", "--json")
        missing = await agentctl(dev_server_address, "replay", "run-does-not-exist")
        fork_chain = await ih.fetch_chain(client, forked.id)
        original_points = ih.fork_points(await ih.fetch_chain(client, original.id))

    reqs = model.requests
    assert [len(r.messages) for r in reqs[:3]] == [2, 4, 6]
    # the fork's first model request is exactly the original's request at turn 2
    assert reqs[3].messages == reqs[1].messages == original_points[2]
    assert fres.status == "completed" and fres.output == "forked answer" and fres.turns == 1
    # lineage: in the run's state, in its history (audit), and in the search attribute
    assert fstate.parent_run_id == original.id
    fa = ih.audit(fork_chain)
    assert (fa.parent_run_id, fa.fork_turn) == (original.id, 2)
    assert fa.timeline[0].seeded_messages == 4
    assert f"forked from {original.id} at turn 2" in ih.render_audit_text(fa)

    # edited last user message and another model
    first_req = reqs[4]
    assert first_req.body["model"] == "other-model"
    assert first_req.messages[:-1] == reqs[0].messages[:-1]
    assert first_req.messages[-1] == {"role": "user", "content": "just say hi"}
    assert reqs[0].messages[-1] == {"role": "user", "content": "count to two"}
    assert eres.output == "hi there"

    # the CLI: a clear usage error out of range; a fork that runs to completion with --json
    assert bad_cli.returncode == 2
    assert "out of range" in bad_cli.stderr and "1..3" in bad_cli.stderr
    assert cli.returncode == 0, cli.stderr
    out = json.loads(cli.stdout)  # --json: only the RunResult on stdout
    assert out["status"] == "completed" and out["output"] == "cli fork answer"
    assert f"lineage: {original.id} -(turn 3)-> run-" in cli.stderr
    assert reqs[5].messages == original_points[3]
    assert missing.returncode == 1 and "no such run" in missing.stderr


async def test_continue_as_new_chain_is_audited_replayed_and_forked_across_executions(
    plain_env: WorkflowEnvironment, tmp_path: Path
):
    client = plain_env.client
    model = ScriptedModel(
        [tool_call("record", {"label": f"s{i}"}) for i in range(1, 5)]
        + [text("done"), text("fork")]
    )
    agents = {"default": {"limits": {"continue_as_new_every_turns": 2}}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("five turns")
        res = await handle.result()
        latest_only = await ih.fetch_history(client, handle.id)
        chain = await ih.fetch_chain(client, handle.id)
        report = await ih.replay(client, handle.id)
        forked = await ih.fork(client, handle.id, 4)  # turn 4 ran in the second execution
        await forked.result()

    assert res.status == "completed" and res.turns == 5
    assert len(chain) == 3 and chain[-1].run_id == latest_only.run_id
    a = ih.audit(chain)
    assert a.chain_complete and a.run_ids == [x.run_id for x in chain]
    assert [s.turn for s in a.model_steps] == [1, 2, 3, 4, 5]
    assert [e.new_run_id for e in a.timeline if e.kind == "continued_as_new"] == a.run_ids[1:]
    assert [c.status for c in a.tool_calls] == ["ok"] * 4
    assert a.status == "completed"
    partial = ih.audit(latest_only)
    assert not partial.chain_complete and [s.turn for s in partial.model_steps] == [5]
    assert report.compatible and report.run_ids == a.run_ids
    assert model.requests[5].messages == model.requests[3].messages


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


class MemoryDriver(StorageDriver):
    """External payload storage in a dict (as the local/S3 stores, without files)."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}

    def name(self) -> str:
        return "test-memory"

    async def store(self, context: Any, payloads: Sequence[Payload]) -> list[StorageDriverClaim]:
        claims = []
        for p in payloads:
            key = f"k{len(self.blobs)}"
            self.blobs[key] = p.SerializeToString()
            claims.append(StorageDriverClaim(claim_data={"key": key}))
        return claims

    async def retrieve(self, context: Any, claims: Sequence[StorageDriverClaim]) -> list[Payload]:
        out = []
        for c in claims:
            p = Payload()
            p.ParseFromString(self.blobs[c.claim_data["key"]])
            out.append(p)
        return out


async def test_audit_fork_and_replay_resolve_externally_stored_payloads(
    plain_env: WorkflowEnvironment, tmp_path: Path
):
    driver = MemoryDriver()
    conv = dataclasses.replace(
        pydantic_data_converter,
        external_storage=ExternalStorage(drivers=[driver], payload_size_threshold=400),
    )
    base = plain_env.client
    client = Client(base.service_client, namespace=base.namespace, data_converter=conv)
    model = ScriptedModel([tool_call("record", {"label": "big"}), text("done"), text("forked")])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("stored elsewhere")
        res = await handle.result()
        raw = await ih.fetch_chain(client, handle.id)
        a = await ih.audit_run(client, handle.id)
        report = await ih.replay(client, handle.id)
        forked = await ih.fork(client, handle.id, 2)
        await forked.result()

    assert res.status == "completed"
    scheduled = [
        e.activity_task_scheduled_event_attributes.input.payloads[0]
        for e in raw[0].events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    refs = [p for p in scheduled if b"StorageReference" in p.metadata.get("messageType", b"")]
    assert refs and driver.blobs  # the model inputs are references in the history
    assert [s.messages for s in ih.audit(raw).model_steps] == [0, 0]  # unreadable as they are
    assert [s.turn for s in a.model_steps] == [1, 2]
    assert a.model_steps[0].messages == 2 and a.model_steps[1].messages == 4
    assert [(c.name, c.status) for c in a.tool_calls] == [("record", "ok")]
    assert a.input == "stored elsewhere" and a.status == "completed"
    assert report.compatible, report.failure
    assert model.requests[2].messages == model.requests[1].messages


async def test_fork_sets_the_parent_search_attribute(client: Client, tmp_path: Path):
    model = ScriptedModel([text("original"), text("fork")])
    async with Harness(client, tmp_path, model) as h:
        original = await h.start("parent")
        await original.result()
        forked = await ih.fork(client, original.id, 1)
        value = None
        try:
            for _ in range(50):
                desc = await forked.describe()
                value = desc.typed_search_attributes.get(SA_PARENT)
                if value:
                    break
                await asyncio.sleep(0.1)
            res = await asyncio.wait_for(forked.result(), timeout=5)
        finally:
            desc = await forked.describe()
            if desc.status is not None and desc.status.name == "RUNNING":
                await forked.terminate("test cleanup")
    assert value == original.id
    assert res.status == "completed"


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
    assert last.timeline[0].continued_from and last.timeline[0].turn == 4


def test_audit_of_a_watched_run_leaves_out_the_stream_signals():
    # recorded at the top level or, once superseded, under v3/
    history = ih.load_history_file(sorted(HISTORIES.rglob("streamed.json"))[0])
    names = {e.workflow_execution_signaled_event_attributes.signal_name for e in history.events}
    assert "__temporal_workflow_stream_publish" in names  # the text deltas reached the run
    a = ih.audit(history)
    assert a.signals == [] and a.status == "completed"
    assert [s.content for s in a.model_steps][-1] == a.result.output


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
