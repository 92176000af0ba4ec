"""Cedar policies and the judge in real runs (issue #39): real Temporal, the scripted model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.support.harness import Harness, until_state
from tests.support.history import no_task_failed
from tests.support.judge import JUDGE_MODEL, AgentAndJudge, judged, verdict
from workers import client as rc
from workers import history as ih
from workers.testing.scripted_model import error, text, tool_call

CEDAR = """
@id("developers-write-notes")
permit(principal in Role::"developer", action == Action::"write_file", resource)
when { resource.path like "notes/*" };

@id("others-ask") @ask
permit(principal, action == Action::"write_file", resource)
unless { principal in Role::"developer" };

@id("never-secrets")
forbid(principal, action, resource) when { resource.path like "secrets/*" };
"""


async def events_of(client: Client, run_id: str) -> list[dict[str, Any]]:
    return [e async for e in rc.follow(client, run_id)]


async def test_cedar_policies_decide_by_role_and_path(client: Client, tmp_path: Path):
    (tmp_path / "tools.cedar").write_text(CEDAR)
    calls = [
        tool_call("write_file", {"path": "notes/a.txt", "content": "x"}, id="c1"),
        tool_call("write_file", {"path": "secrets/k", "content": "x"}, id="c2"),
        text("done"),
    ]
    async with Harness(
        client,
        tmp_path,
        AgentAndJudge(calls, []).server(),
        agents={"default": {"policy": {"cedar": "tools.cedar"}}},
    ) as h:
        handle = await h.start("write", principal_id="alice", roles=["developer"])
        res = await asyncio.wait_for(handle.result(), 60)
        await no_task_failed(handle)
    by_id = {r.id: r for r in res.tool_calls}
    assert (by_id["c1"].status, by_id["c1"].policy_id) == (
        "ok",
        "cedar:developers-write-notes",
    ), by_id["c1"]
    assert (by_id["c2"].status, by_id["c2"].policy_id) == ("denied", "cedar:never-secrets")
    assert (h.workspace / "notes/a.txt").read_text() == "x"
    assert not (h.workspace / "secrets").exists()


async def test_without_the_role_cedar_asks_and_the_judge_approves(client: Client, tmp_path: Path):
    (tmp_path / "tools.cedar").write_text(CEDAR)
    script = AgentAndJudge(
        [tool_call("write_file", {"path": "notes/b.txt", "content": "y"}, id="c1"), text("ok")],
        [verdict("approve", "a note, as the rubric allows")],
    )
    spec = judged()
    spec["policy"] = {"cedar": "tools.cedar", "judge": spec["policy"]["judge"]}
    async with Harness(client, tmp_path, script.server(), agents={"default": spec}) as h:
        handle = await h.start("write a note", principal_id="bob")
        res = await asyncio.wait_for(handle.result(), 60)
        events = await events_of(client, handle.id)
        await no_task_failed(handle)
        audit = ih.audit(await ih.fetch_chain(client, handle.id))
    # the audit: the judge's decision, the Cedar policy that asked
    assert [(d.who, d.decision, d.via, d.accepted) for d in audit.decisions] == [
        (f"judge:{JUDGE_MODEL}", "approve", "judge", True)
    ]
    [entry] = audit.tool_calls
    assert (entry.policy_id, entry.decided_by, entry.status) == (
        "cedar:others-ask",
        f"judge:{JUDGE_MODEL}",
        "ok",
    )
    rec = res.tool_calls[0]
    assert (rec.status, rec.policy, rec.policy_id) == ("ok", "approve", "cedar:others-ask")
    assert rec.decided_by == f"judge:{JUDGE_MODEL}"
    [d] = res.decisions
    assert (d.decision, d.principal_id, d.via) == ("approve", f"judge:{JUDGE_MODEL}", "judge")
    assert d.comment == "a note, as the rubric allows"
    # the judge's tokens are the run's too
    steps = sum(int(m["usage"]["total_tokens"]) for m in res.model_steps)
    assert res.usage.total_tokens > steps > 0
    # nobody was waited for
    assert "awaiting_approval" not in [e.get("status") for e in events if e["type"] == "status"]
    decided = [e for e in events if e["type"] == "approval_decided"]
    assert [(e["principal_id"], e["decision"]) for e in decided] == [
        (f"judge:{JUDGE_MODEL}", "approve")
    ]
    # the judge's answer was constrained to the verdict's schema (spec default)
    assert script.judge_requests[0]["response_format"]["type"] == "json_schema"
    # the judge saw the call, the goal and the rubric
    shown = script.judge_requests[0]["messages"][1]["content"]
    assert "notes/b.txt" in shown and "write a note" in shown and "Approve writes" in shown


async def test_a_rejection_is_recorded_and_the_model_told(client: Client, tmp_path: Path):
    script = AgentAndJudge(
        [tool_call("deploy", {"target": "prod"}, id="c1"), text("not deployed")],
        [verdict("reject", "deploys are not in the rubric")],
    )
    async with Harness(client, tmp_path, script.server(), agents={"default": judged()}) as h:
        handle = await h.start("deploy it")
        res = await asyncio.wait_for(handle.result(), 60)
        transcript = await handle.query("transcript")
    assert res.tool_calls[0].status == "rejected"
    assert res.decisions[0].principal_id == f"judge:{JUDGE_MODEL}"
    told = [m["content"] for m in transcript if m.get("role") == "tool"]
    assert told == [
        f"The policy's judge (judge:{JUDGE_MODEL}) rejected this tool call; it was not run. "
        "Reason: deploys are not in the rubric"
    ]
    assert not h.journal.exists()  # deploy never ran


async def test_escalate_unreadable_failing_and_late_judges_leave_calls_to_a_person(
    client: Client, tmp_path: Path
):
    late_approval = text(json.dumps({"verdict": "approve", "reason": "late"}), delay=4)
    script = AgentAndJudge(
        [
            tool_call("deploy", {"target": "a"}, id="c1"),
            tool_call("deploy", {"target": "b"}, id="c2"),
            tool_call("deploy", {"target": "c"}, id="c3"),
            tool_call("deploy", {"target": "d"}, id="c4"),
            text("done"),
        ],
        [
            verdict("escalate", "not sure about a"),
            text('Sure, I approve: {"verdict": "approve", "reason": "fine"}'),
            error(500, {"error": "judge down"}),
            late_approval,  # after the judge's timeout: not an approval
        ],
    )
    agents = {"default": judged(timeout_seconds=1)}
    async with Harness(client, tmp_path, script.server(), agents=agents) as h:
        handle = await h.start("deploy four times", principal_id="alice")
        for cid, why in (
            ("c1", "not sure about a"),
            ("c2", "unreadable"),
            ("c3", "failed"),
            ("c4", "failed"),
        ):
            st = await until_state(handle, lambda s, c=cid: any(
                p.tool_call_id == c and p.escalated for p in s.pending_approvals
            ))  # fmt: skip
            pending = next(p for p in st.pending_approvals if p.tool_call_id == cid)
            assert why in (pending.escalated or ""), pending
            assert all(d.principal_id == "alice" for d in st.decisions)
            await rc.decide(client, handle.id, cid, "approve", "alice")
        res = await asyncio.wait_for(handle.result(), 60)
        events = await events_of(client, handle.id)
        await no_task_failed(handle)
        audit = ih.audit(await ih.fetch_chain(client, handle.id))
    assert [r.status for r in res.tool_calls] == ["ok"] * 4
    assert {d.principal_id for d in res.decisions} == {"alice"}
    assert [(d.who, d.via) for d in audit.decisions] == [("alice", "update")] * 4
    escalated = [e for e in events if e["type"] == "approval_escalated"]
    assert [e["tool_call_id"] for e in escalated] == ["c1", "c2", "c3", "c4"]
    assert all(e["principal_id"] == f"judge:{JUDGE_MODEL}" for e in escalated)


async def test_cedar_decides_local_calls_that_would_ride_the_next_model_step(
    client: Client, tmp_path: Path
):
    """Local read-only tools' calls ride the next model step only when the policy allows them:
    with Cedar, a call it forbids never runs (``workflows/model_step.py``, ``ToolsFirst``)."""
    (tmp_path / "reads.cedar").write_text(
        '@id("no-private") forbid(principal, action == Action::"read_file", resource)\n'
        'when { resource.path like "private/*" };\n'
    )
    calls = [  # one call a turn: each alone would ride the next model step if allowed
        tool_call("read_file", {"path": "README.md"}, id="r1"),
        tool_call("read_file", {"path": "private/key.txt"}, id="r2"),
        text("done"),
    ]
    async with Harness(
        client, tmp_path, AgentAndJudge(calls, []).server(),
        agents={"default": {"policy": {"cedar": "reads.cedar"}}},
    ) as h:  # fmt: skip
        (h.workspace / "private").mkdir()
        (h.workspace / "private/key.txt").write_text("TOP-SECRET-VALUE")
        handle = await h.start("read both")
        res = await asyncio.wait_for(handle.result(), 60)
        await no_task_failed(handle)
        transcript = await handle.query("transcript")
    by_id = {r.id: r for r in res.tool_calls}
    assert (by_id["r1"].status, by_id["r1"].policy_id) == ("ok", "by_risk")
    assert (by_id["r2"].status, by_id["r2"].policy_id) == ("denied", "cedar:no-private")
    assert "TOP-SECRET-VALUE" not in str(transcript)
    assert "the answer is 42" in str(transcript)


async def test_a_person_who_decides_while_the_judge_thinks_decides(client: Client, tmp_path: Path):
    """The call waits for a person from the start: a person's decision taken while the judge
    works stands, and the judge's later verdict is not recorded."""
    script = AgentAndJudge(
        [tool_call("deploy", {"target": "prod"}, id="c1"), text("ok")],
        [text(json.dumps({"verdict": "reject", "reason": "too late"}), delay=3)],
    )
    async with Harness(client, tmp_path, script.server(), agents={"default": judged()}) as h:
        handle = await h.start("deploy", principal_id="alice")
        await until_state(handle, lambda s: bool(s.pending_approvals))
        await rc.decide(client, handle.id, "c1", "approve", "alice")
        res = await asyncio.wait_for(handle.result(), 60)
        await no_task_failed(handle)
    assert [(d.principal_id, d.decision) for d in res.decisions] == [("alice", "approve")]
    assert res.tool_calls[0].status == "ok"
    assert len(script.judge_requests) == 1  # the judge was asked, and its answer dropped
