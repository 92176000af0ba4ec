"""What an outside probe (2026-11-27) sent that failed every workflow task, or ran a call on
another's approval: each now ends as a named outcome, the run's state kept, no task failed.

Model replies: a call id reused across turns or within a reply, a lone surrogate in arguments, a
usage count past what a search attribute holds. Clients: names over a search attribute's size, a
deadline that overflows, a decision with 1 MB of arguments.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from tests.support.harness import Harness, until_state
from tests.support.history import no_task_failed
from tests.support.people import GATED, deployed
from tests.support.tools import journal_events
from workers import client as rc
from workers.history import replay
from workers.testing.scripted_model import ScriptedModel, garbage, text, tool_call, tool_calls
from workers.testing.scripted_replies import ToolCall
from workflows.models import RunResult
from workflows.versions import PATCH_UNIQUE_CALL_IDS

ALLOW = {"default": {"policy": {"default": "allow"}}}


async def test_a_call_id_reused_in_a_later_turn_waits_for_its_own_approval(
    client: Client, tmp_path: Path
):
    model = ScriptedModel(
        [
            tool_call("deploy", {"target": "staging"}, id="call_0"),
            tool_call("deploy", {"target": "prod"}, id="call_0"),  # small models reuse ids
            text("done"),
        ]
    )
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle = await h.start("deploy twice")
        st = await until_state(handle, lambda s: s.status == "awaiting_approval")
        assert [p.tool_call_id for p in st.pending_approvals] == ["call_0"]
        await rc.decide(client, handle.id, "call_0", "approve", "alice")
        # the second call, with the same id from the model, waits for a person of its own
        st = await until_state(
            handle, lambda s: [p.tool_call_id for p in s.pending_approvals] == ["call_0-2"]
        )
        assert deployed(h) == ["staging"]
        await rc.decide(client, handle.id, "call_0-2", "approve", "alice")
        res = await handle.result()
        events = await no_task_failed(handle)
        report = await replay(client, handle.id)
    assert res.status == "completed"
    patches = [
        str(e.marker_recorded_event_attributes.details)
        for e in events
        if e.marker_recorded_event_attributes.marker_name == "core_patch"
    ]
    assert sum(PATCH_UNIQUE_CALL_IDS in p for p in patches) == 1  # asked once, when needed
    assert report.compatible, report.failure
    assert [(c.id, c.decided_by) for c in res.tool_calls] == [
        ("call_0", "alice"),
        ("call_0-2", "alice"),
    ]
    assert deployed(h) == ["staging", "prod"]


async def test_two_calls_with_one_id_in_a_reply_are_two_approvals(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [
            tool_calls(
                [
                    ToolCall("deploy", '{"target": "a"}', id="same"),
                    ToolCall("deploy", '{"target": "b"}', id="same"),
                ]
            ),
            text("done"),
        ]
    )
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle = await h.start("deploy both")
        st = await until_state(handle, lambda s: len(s.pending_approvals) == 2)
        assert [p.tool_call_id for p in st.pending_approvals] == ["same", "same-2"]
        await rc.decide(client, handle.id, "same", "approve", "alice")
        # one approval is one call's: the run still waits for the other (before: both ran)
        st = await until_state(handle, lambda s: bool(s.decisions))
        assert st.status == "awaiting_approval" and deployed(h) == []
        await rc.decide(client, handle.id, "same-2", "reject", "alice", reason="not b")
        res = await handle.result()
    assert res.status == "completed"
    assert deployed(h) == ["a"]


async def test_a_lone_surrogate_in_arguments_reaches_the_tool_as_a_replacement_character(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([tool_call("record", '{"label": "\\ud800x"}'), text("done")])
    async with Harness(client, tmp_path, model, agents=ALLOW) as h:
        handle = await h.start("go")
        res = await handle.result()
        events = await no_task_failed(handle)
    assert res.status == "completed"
    assert [e["label"] for e in journal_events(h.journal) if e["tool"] == "record"] == ["\ufffdx"]
    markers = [str(e.marker_recorded_event_attributes.details) for e in events]
    assert not any(PATCH_UNIQUE_CALL_IDS in m for m in markers)  # no repeated id: no marker


def _completion(usage: Mapping[str, object]) -> str:
    message = {"role": "assistant", "content": "hi"}
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage,
        }
    )


@pytest.mark.parametrize(
    ("reported", "kept"),
    [(2 * 10**20, 10**12), (-(10**9), 0)],
    ids=["past-int64", "negative"],
)
async def test_usage_a_server_reports_is_bounded(
    client: Client, tmp_path: Path, reported: int, kept: int
):
    usage = {"prompt_tokens": reported, "completion_tokens": reported, "total_tokens": reported}
    model = ScriptedModel([garbage(_completion(usage), content_type="application/json")])
    async with Harness(client, tmp_path, model, agents=ALLOW) as h:
        handle = await h.start("go")
        res = await handle.result()
        await no_task_failed(handle)
    assert res.status == "completed" and res.output == "hi"
    assert res.usage.total_tokens == kept


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("tenant_id", "t" * 10_000, "tenant_id"),
        ("principal_id", "p" * 100_000, "principal_id"),
        ("parent_run_id", "r" * 3_000, "parent_run_id"),
        ("limits", {"max_seconds": "inf"}, "max_seconds"),
        ("limits", {"max_seconds": 1e300}, "max_seconds"),
    ],
    ids=["tenant-10k", "principal-100k", "parent-3k", "max-seconds-inf", "max-seconds-1e300"],
)
async def test_a_start_input_past_what_the_server_holds_ends_the_run_failed_and_named(
    client: Client, tmp_path: Path, field: str, value: object, named: str
):
    async with Harness(client, tmp_path, ScriptedModel([text("never")]), agents=ALLOW) as h:
        handle = await client.start_workflow(
            "AgentRun",
            {"input": "go", field: value},
            id=f"hostile-{uuid.uuid4().hex[:8]}",
            task_queue=h.task_queue,
            result_type=RunResult,
        )
        res = await handle.result()
        await no_task_failed(handle)
    assert res.status == "failed" and res.stopped_reason == "invalid start input"
    assert named in (res.error or "")


async def test_a_decision_with_a_megabyte_of_arguments_is_refused_and_the_run_goes_on(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}), text("done")])
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle = await h.start("deploy")
        st = await until_state(handle, lambda s: s.status == "awaiting_approval")
        call_id = st.pending_approvals[0].tool_call_id
        huge = {"target": "x" * (1 << 20)}
        with pytest.raises(ValueError, match="at most 262144"):  # refused before it is sent
            await rc.decide(client, handle.id, call_id, "approve", "alice", arguments=huge)
        raw = {"tool_call_id": call_id, "decision": "approve", "principal_id": "alice"}
        with pytest.raises(WorkflowUpdateFailedError) as refused:  # and by the run itself
            await handle.execute_update("decide", {**raw, "arguments": huge})
        assert "at most 262144" in str(refused.value.cause)
        await rc.decide(client, handle.id, call_id, "approve", "alice", arguments={"target": "qa"})
        res = await handle.result()
        await no_task_failed(handle)
    assert res.status == "completed"
    assert deployed(h) == ["qa"]


async def test_arguments_nested_5000_deep_are_a_tool_error_and_the_run_goes_on(
    client: Client, tmp_path: Path
):
    deep = '{"label": ' + "[" * 5000 + "]" * 5000 + "}"
    model = ScriptedModel([tool_call("record", deep), text("done")])
    async with Harness(client, tmp_path, model, agents=ALLOW) as h:
        handle = await h.start("go")
        res = await handle.result()
        await no_task_failed(handle)
    assert res.status == "completed" and res.output == "done"
    assert [c.status for c in res.tool_calls] == ["error"]
    told = [m for m in model.requests[1].messages if m["role"] == "tool"]
    assert "nest too deeply" in str(told[0]["content"]) or "not valid JSON" in str(
        told[0]["content"]
    )
