"""What the Temporal Web UI shows of a run, read back through the client.

The static summary and details given at start, the current details the run keeps up to date
(``workflow.set_current_details``, read with the built-in ``__temporal_workflow_metadata`` query,
which is what the UI calls), each activity's summary in the history, the search attributes, and
the visibility query ``agentctl list`` uses.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from tests.support.harness import Harness, until_state
from tests.support.webui import activity_summaries, current_details
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workflows import render
from workflows.agent_run import (
    SA_AGENT,
    SA_COST,
    SA_PARENT,
    SA_PRINCIPAL,
    SA_SPEC,
    SA_STATUS,
    SA_TENANT,
    SA_TOKENS,
)
from workflows.models import RunRequest

PRICING = {"prompt_per_mtok": 3.0, "completion_per_mtok": 15.0}


def agent_name() -> str:
    """A name no other test's runs use, so visibility queries see only this test's runs."""
    return f"webui-{uuid.uuid4().hex[:8]}"


async def timer_summaries(client: Client, handle: WorkflowHandle[Any, Any]) -> list[str | None]:
    """Decoded summary of every TimerStarted event, in order."""
    out = []
    async for ev in handle.fetch_history_events():
        if ev.event_type != EventType.EVENT_TYPE_TIMER_STARTED:
            continue
        summary = None
        if ev.HasField("user_metadata") and ev.user_metadata.HasField("summary"):
            (summary,) = await client.data_converter.decode([ev.user_metadata.summary])
        out.append(summary)
    return out


async def listed(
    client: Client, query: str, want: set[str], unwanted: set[str], timeout: float = 15.0
) -> set[str]:
    """Poll the (eventually consistent) visibility store until ``want`` is listed and ``unwanted`` is not."""
    ids: set[str] = set()
    for _ in range(int(timeout / 0.2)):
        ids = {wf.id async for wf in client.list_workflows(query)}
        if want <= ids and not (ids & unwanted):
            return ids
        await asyncio.sleep(0.2)
    raise AssertionError(
        f"{query!r} listed {sorted(ids)}; wanted {sorted(want)} and not {sorted(unwanted)}"
    )


async def test_a_finished_run_shows_its_summary_details_activities_and_search_attributes(
    client: Client, tmp_path: Path
):
    agent = agent_name()
    model = ScriptedModel(
        [tool_call("read_file", {"path": "README.md"}), text("The answer is 42.")]
    )
    async with Harness(client, tmp_path, model, agents={agent: {"pricing": PRICING}}) as h:
        req = RunRequest(
            agent=agent, input="What does the README say?", tenant_id="acme", principal_id="alice"
        )
        handle = await rc.start_run(client, req, task_queue=h.task_queue)
        res = await asyncio.wait_for(handle.result(), timeout=60)
        assert res.status == "completed"

        desc = await handle.describe()
        # static summary (list and header) and static details (top of the run page)
        assert (
            await desc.static_summary()
            == f"agent {agent} (task) for alice@acme: What does the README say?"
        )
        assert await desc.static_summary() == render.static_summary(req)
        details = await desc.static_details()
        assert details is not None
        assert f"**Agent:** `{agent}`" in details
        assert "**Tenant:** `acme` · **Principal:** `alice`" in details
        assert "> What does the README say?" in details

        # current details: kept by the run, final state after it closed (the query replays it)
        cur = await current_details(handle)
        assert cur.startswith("### Status: `completed`")
        assert (
            f"| 2 / 20 | `scripted` | {res.usage.total_tokens} | {res.usage.cost_usd:.6f} | 1 |"
            in cur
        )
        # (the tool call as run: the tool's defaults filled in, unset ones left out)
        assert (
            "- turn 1: `tool: read_file path=README.md` → **ok**" in cur
        )  # as the model asked (#40)
        assert "> The answer is 42." in cur
        assert f"spec sha256 `{res.spec_hash[:12]}`" in cur
        assert "Waiting for approval" not in cur

        # each activity's summary in the history (read_file, a local tool, rides the next model
        # step: workflows/model_step.py, ToolsFirst)
        assert await activity_summaries(client, handle) == [
            ("spec.resolve", f"spec: resolve agent {agent}"),
            ("model.complete", "model: scripted turn 1"),
            ("model.complete", "model: scripted turn 2 after tool: read_file path=README.md"),
        ]

    # search attributes (describe reads the execution itself: no visibility delay)
    sa = desc.typed_search_attributes
    assert sa.get(SA_AGENT) == agent
    assert sa.get(SA_TENANT) == "acme"
    assert sa.get(SA_PRINCIPAL) == "alice"
    assert sa.get(SA_STATUS) == res.status == "completed"
    assert sa.get(SA_TOKENS) == res.usage.total_tokens > 0
    assert res.usage.cost_usd > 0
    assert sa.get(SA_COST) == pytest.approx(res.usage.cost_usd)
    assert sa.get(SA_SPEC) == res.spec_hash and len(res.spec_hash) == 64
    assert sa.get(SA_PARENT) is None  # not a fork


async def test_a_run_waiting_for_approval_shows_the_pending_call_and_is_listed_as_waiting(
    client: Client, tmp_path: Path
):
    agent = agent_name()
    model = ScriptedModel(
        scripts={
            "[finished]": ["nothing to do"],
            "[waiting]": [tool_call("deploy", {"target": "prod"}, id="call_dep"), text("deployed")],
        }
    )
    spec = {
        "pricing": PRICING,
        "policy": {"approvers": ["alice", "role:ops"], "roles": {"ops": ["olga"]}},
    }
    async with Harness(client, tmp_path, model, agents={agent: spec}) as h:
        done = await rc.start_run(
            client,
            RunRequest(agent=agent, input="[finished] hi", tenant_id="acme"),
            task_queue=h.task_queue,
        )
        assert (await asyncio.wait_for(done.result(), timeout=60)).status == "completed"
        waiting = await rc.start_run(
            client,
            RunRequest(
                agent=agent, input="[waiting] deploy to prod", tenant_id="acme", principal_id="bob"
            ),
            task_queue=h.task_queue,
        )
        await until_state(waiting, lambda s: s.status == "awaiting_approval")

        # the pending approval in the current details: call, tool, arguments, who may approve
        cur = await current_details(waiting)
        assert cur.startswith("### Status: `awaiting_approval`")
        assert "#### Waiting for approval" in cur
        assert '| `call_dep` | `deploy` | `{"target":"prod"}` | alice, role:ops |' in cur
        assert "signal `approve`" in cur
        assert await activity_summaries(client, waiting) == [
            ("spec.resolve", f"spec: resolve agent {agent}"),
            ("model.complete", "model: scripted turn 1"),
        ]  # the gated tool is not scheduled before a person decides
        # the timeline's timers say what they are: the approval's timeout (the run's deadline
        # is the model step's schedule-to-close timeout from revision 5: no timer)
        assert await timer_summaries(client, waiting) == [
            "waiting for approval of deploy (timeout)",
        ]

        desc = await waiting.describe()
        sa = desc.typed_search_attributes
        assert sa.get(SA_STATUS) == "awaiting_approval"
        assert sa.get(SA_PRINCIPAL) == "bob" and sa.get(SA_AGENT) == agent
        tokens = sa.get(SA_TOKENS)
        assert tokens is not None and tokens > 0  # the first model step's tokens
        assert (
            await desc.static_summary()
            == f"agent {agent} (task) for bob@acme: [waiting] deploy to prod"
        )

        # agentctl list's query finds the waiting run, not the finished one
        awaiting_q = rc.list_query(agent=agent, status="awaiting_approval")
        await listed(client, awaiting_q, want={waiting.id}, unwanted={done.id})
        await listed(
            client,
            rc.list_query(agent=agent, status="completed"),
            want={done.id},
            unwanted={waiting.id},
        )
        await listed(
            client,
            rc.list_query(agent=agent, tenant="acme"),
            want={done.id, waiting.id},
            unwanted=set(),
        )

        # once approved, the details, the activity summary and the listing follow
        await rc.decide(client, waiting.id, "call_dep", "approve", "olga")
        res = await asyncio.wait_for(waiting.result(), timeout=60)
        assert res.status == "completed"
        cur = await current_details(waiting)
        assert "Waiting for approval" not in cur
        assert "- turn 1: `tool: deploy target=prod` → **ok**" in cur
        assert ("tool.invoke", "tool: deploy target=prod") in await activity_summaries(
            client, waiting
        )
        await listed(client, awaiting_q, want=set(), unwanted={waiting.id})
        assert (await waiting.describe()).typed_search_attributes.get(SA_STATUS) == "completed"


async def test_a_chat_run_is_listed_as_running_while_it_answers_the_next_message(
    client: Client, tmp_path: Path
):
    agent = agent_name()
    model = ScriptedModel([text("hello!"), text("a slow answer", delay=3)])
    async with Harness(client, tmp_path, model, agents={agent: {"idle_timeout_seconds": 60}}) as h:
        handle = await rc.start_run(
            client, RunRequest(agent=agent, input="hi", mode="chat"), task_queue=h.task_queue
        )
        await until_state(handle, lambda s: s.status == "waiting_for_message")
        assert (await handle.describe()).typed_search_attributes.get(
            SA_STATUS
        ) == "waiting_for_message"
        await rc.send_message(client, handle.id, "and then?", "anonymous")
        await until_state(handle, lambda s: s.status == "running" and s.turn == 2)
        try:
            assert (await handle.describe()).typed_search_attributes.get(SA_STATUS) == "running"
        finally:
            await rc.interrupt(client, handle.id, "anonymous", "bye")
            await asyncio.wait_for(handle.result(), timeout=30)
