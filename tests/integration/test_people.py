"""People in the loop: policy, approvals, interrupt, pause/resume, steering, conversations."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from tests.support.harness import Harness, until_state
from tests.support.people import GATED, deployed
from tests.support.webui import activity_summaries
from workers import client as rc
from workers.local.dev_server import temporal_binary
from workers.testing.scripted_model import ScriptedModel, text, tool_call, tool_calls
from workflows.models import ApproveSignal, RejectSignal, RunState


async def test_allow_deny_and_approve_paths(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [
            tool_calls(
                [
                    ("record", {"label": "allowed"}),
                    ("calculator", {"expression": "1+1"}),
                    ("deploy", {"target": "prod"}),
                    ("write_file", {"path": "drafts/a.txt", "content": "draft"}),
                ]
            ),
            text("done"),
        ]
    )
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle = await h.start("do four things")
        st = await until_state(handle, lambda s: s.status == "awaiting_approval")
        assert [p.name for p in st.pending_approvals] == ["deploy"]
        assert st.pending_approvals[0].approvers == ["alice", "role:ops"]
        # the allowed calls ran while the approval waits
        await until_state(
            handle, lambda s: [c.status for c in s.tool_calls if c.name == "record"] == ["ok"]
        )
        assert deployed(h) == []
        await rc.decide(client, handle.id, st.pending_approvals[0].tool_call_id, "approve", "alice")
        res = await handle.result()
    assert res.status == "completed"
    by_name = {c.name: c for c in res.tool_calls}
    assert by_name["record"].status == "ok" and by_name["record"].policy == "allow"
    assert by_name["calculator"].status == "denied" and by_name["calculator"].policy == "deny"
    assert by_name["deploy"].status == "ok" and by_name["deploy"].decided_by == "alice"
    assert by_name["write_file"].status == "ok"  # drafts/ rule: allowed without a person
    assert (h.workspace / "drafts" / "a.txt").read_text() == "draft"
    assert deployed(h) == ["prod"]
    tool_msgs = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"]
    assert "denied by policy: no maths today" in tool_msgs[1]


async def test_approve_with_edited_arguments_runs_with_the_new_ones(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}), text("done")])
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle, call_id = await h.start_held("deploy")
        await rc.approve_signal(
            client,
            handle.id,
            ApproveSignal(
                tool_call_id=call_id,
                principal_id="olga",
                arguments={"target": "staging"},
            ),
        )
        res = await handle.result()
        final = await handle.query("state", result_type=RunState)
        summaries = [
            s for kind, s in await activity_summaries(client, handle) if kind == "tool.invoke"
        ]
    assert deployed(h) == ["staging"]
    # the Web UI names the call as the model asked it, and says a person edited it
    assert summaries == ["tool: deploy target=prod (edited at approval)"]
    # the model's arguments, and the edited ones it ran with beside them (issue #40)
    assert res.tool_calls[0].arguments == {"target": "prod"}
    assert res.tool_calls[0].run_arguments == {"target": "staging"}
    assert final.decisions[0].principal_id == "olga" and final.decisions[0].arguments == {
        "target": "staging"
    }


async def test_reject_never_runs_the_tool_and_tells_the_model(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}), text("ok, not deploying")])
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle, call_id = await h.start_held("deploy")
        await rc.reject_signal(
            client,
            handle.id,
            RejectSignal(
                tool_call_id=call_id,
                principal_id="alice",
                reason="freeze week",
            ),
        )
        res = await handle.result()
    assert deployed(h) == []
    assert res.tool_calls[0].status == "rejected"
    last_tool = [m for m in model.requests[1].messages if m["role"] == "tool"][-1]
    assert "rejected" in last_tool["content"] and "freeze week" in last_tool["content"]


async def test_duplicate_stale_and_unauthorised_decisions(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}, id="call_dep"), text("done")])
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle, _ = await h.start_held("deploy")
        # unauthorised: the update is refused by its validator, the signal is ignored and recorded
        with pytest.raises(WorkflowUpdateFailedError) as exc:
            await rc.decide(client, handle.id, "call_dep", "approve", "mallory")
        assert "mallory" in str(exc.value.cause)
        await rc.approve_signal(
            client, handle.id, ApproveSignal(tool_call_id="call_dep", principal_id="mallory")
        )
        # unknown id
        with pytest.raises(WorkflowUpdateFailedError) as exc2:
            await rc.decide(client, handle.id, "call_nope", "approve", "alice")
        assert "unknown" in str(exc2.value.cause)
        st = await until_state(handle, lambda s: len(s.ignored_signals) == 1)
        assert (
            st.ignored_signals[0].principal_id == "mallory"
            and "not among the approvers" in st.ignored_signals[0].reason
        )
        assert st.status == "awaiting_approval" and deployed(h) == []
        # a real decision, then a duplicate (ignored) and a stale update (refused)
        await rc.decide(client, handle.id, "call_dep", "approve", "alice")
        await rc.reject_signal(
            client,
            handle.id,
            RejectSignal(tool_call_id="call_dep", principal_id="alice", reason="changed my mind"),
        )
        res = await handle.result()
        with pytest.raises(Exception) as exc3:  # noqa: B017 - closed run: the update cannot be delivered
            await rc.decide(client, handle.id, "call_dep", "reject", "alice")
        assert exc3.value is not None
        final = await handle.query("state", result_type=RunState)
    assert deployed(h) == ["prod"]
    assert res.tool_calls[0].status == "ok"
    assert [d.decision for d in final.decisions] == ["approve"]
    assert any("already decided" in s.reason for s in final.ignored_signals)


async def test_several_pending_calls_are_decided_one_by_one(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [tool_calls([("deploy", {"target": "a"}), ("deploy", {"target": "b"})]), text("done")]
    )
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle = await h.start("deploy twice")
        st = await until_state(handle, lambda s: len(s.pending_approvals) == 2)
        first, second = (p.tool_call_id for p in st.pending_approvals)
        await rc.decide(client, handle.id, first, "approve", "alice")
        st = await until_state(handle, lambda s: len(s.decisions) == 1)
        assert st.status == "awaiting_approval"  # the turn waits for every pending call
        assert model.count == 1
        await rc.decide(client, handle.id, second, "reject", "alice", reason="only one")
        res = await handle.result()
    assert deployed(h) == ["a"]
    assert [c.status for c in res.tool_calls] == ["ok", "rejected"]


async def test_interrupt_during_a_slow_model_call(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("record", {"label": "one"}), text("too late", delay=30)])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("slow")
        await until_state(handle, lambda s: s.turn == 2)
        for _ in range(200):
            if model.count == 2:
                break
            await asyncio.sleep(0.05)
        await rc.interrupt(client, handle.id, "alice", "stop now")
        res = await asyncio.wait_for(handle.result(), timeout=15)  # far less than the model's 30 s
        transcript = await handle.query("transcript")
    assert res.status == "interrupted"
    assert res.stopped_reason == "stop now"
    assert [c.status for c in res.tool_calls] == ["ok"]
    assert transcript[-1]["role"] == "tool"  # the work so far is kept


async def test_temporal_cancellation_ends_the_run_cleanly(client: Client, tmp_path: Path):
    model = ScriptedModel([text("never", delay=30)])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("slow")
        for _ in range(200):
            if model.count == 1:
                break
            await asyncio.sleep(0.05)
        await handle.cancel()
        res = await asyncio.wait_for(handle.result(), timeout=15)
    assert res.status == "interrupted"
    assert "cancelled" in res.stopped_reason


async def test_pause_and_resume(client: Client, tmp_path: Path):
    model = ScriptedModel([tool_call("slow_echo", {"text": "x", "seconds": 1}), text("done")])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("pause me")
        await until_state(handle, lambda s: s.turn == 1)
        await rc.pause(client, handle.id, "alice")
        st = await until_state(handle, lambda s: s.status == "paused")
        await asyncio.sleep(1.0)
        assert model.count == 1  # held before the next model step
        assert st.paused
        await rc.resume(client, handle.id, "alice")
        res = await handle.result()
    assert res.status == "completed" and model.count == 2


async def test_steering_message_is_seen_by_the_next_model_step(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [tool_call("slow_echo", {"text": "x", "seconds": 1.5}), text("ok, in French")]
    )
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("say hello")
        await until_state(handle, lambda s: s.turn == 1)
        await rc.send_message(client, handle.id, "answer in French please", "alice")
        res = await handle.result()
    assert res.status == "completed"
    second = model.requests[1].messages
    assert second[-1] == {"role": "user", "content": "answer in French please"}
    assert second[-2]["role"] == "tool"


async def test_chat_mode_waits_for_the_next_message(client: Client, tmp_path: Path):
    model = ScriptedModel(["hello!", "you said: how are you"])
    async with Harness(
        client, tmp_path, model, agents={"default": {"idle_timeout_seconds": 60}}
    ) as h:
        handle = await h.start("hi", mode="chat")
        st = await until_state(handle, lambda s: s.status == "waiting_for_message")
        assert st.output == "hello!"
        await rc.send_message(client, handle.id, "how are you", "anonymous")
        st = await until_state(handle, lambda s: s.status == "waiting_for_message" and s.turn == 2)
        assert st.output == "you said: how are you"
        transcript = await handle.query("transcript")
        assert [m["role"] for m in transcript] == [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
        ]
        await rc.interrupt(client, handle.id, "anonymous", "bye")
        res = await handle.result()
    assert res.status == "interrupted" and res.turns == 2


async def test_worker_restart_while_awaiting_approval_runs_the_call_once(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}), text("done")])
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle, call_id = await h.start_held("deploy")
        await h.stop_worker()
        await h.start_worker()  # a new worker: the run is rebuilt from its history
        await rc.decide(client, handle.id, call_id, "approve", "alice")
        res = await handle.result()
    assert res.status == "completed"
    assert deployed(h) == ["prod"]


async def test_decisions_with_the_plain_temporal_cli(
    client: Client, tmp_path: Path, dev_server_address: str
):
    model = ScriptedModel(
        [tool_calls([("deploy", {"target": "a"}), ("deploy", {"target": "b"})]), text("done")]
    )
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle = await h.start("deploy")
        st = await until_state(handle, lambda s: len(s.pending_approvals) == 2)
        a, b = (p.tool_call_id for p in st.pending_approvals)

        async def temporal(*args: str) -> subprocess.CompletedProcess[str]:
            # in a thread: the worker shares this event loop and must keep answering queries
            return await asyncio.to_thread(
                subprocess.run,
                [
                    str(temporal_binary()),
                    "workflow",
                    *args,
                    "--address",
                    dev_server_address,
                    "--workflow-id",
                    handle.id,
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )

        r1 = await temporal(
            "signal",
            "--name",
            "approve",
            "--input",
            json.dumps({"tool_call_id": a, "principal_id": "alice"}),
        )
        r2 = await temporal(
            "signal",
            "--name",
            "reject",
            "--input",
            json.dumps({"tool_call_id": b, "principal_id": "olga", "reason": "cli says no"}),
        )
        assert r1.returncode == 0, r1.stderr
        assert r2.returncode == 0, r2.stderr
        res = await handle.result()
        q = await temporal("query", "--name", "state")
    assert deployed(h) == ["a"]
    assert [c.status for c in res.tool_calls] == ["ok", "rejected"]
    assert q.returncode == 0 and '"decisions"' in q.stdout
