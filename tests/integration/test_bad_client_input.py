"""Whatever a client sends, a run never wedges (docs/contract.md, "Any Temporal client").

Each case goes through a bare Temporal client (with the pydantic data converter and with the SDK's
default one) or through the ``temporal`` CLI, as a user of any SDK would send it; the fetched
history must never hold a ``WorkflowTaskFailed`` event, and a valid approval sent afterwards must
still be applied. A run started by a bare client with only a ``RunRequest`` gets its search
attributes like one started by ``agentctl``.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.contracts import SEARCH_ATTRIBUTES
from tests.support.cli import agentctl, agentctl_env, temporal_cli
from tests.support.harness import Harness, until_state
from tests.support.history import no_task_failed
from tests.support.people import GATED, deployed
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workflows.models import RunResult, RunState

DEPLOY = [tool_call("deploy", {"target": "prod"}, id="call_d"), text("deployed")]


@pytest.fixture(params=["pydantic", "default"])
async def bare(request, dev_server_address: str) -> Client:
    """A client that is not ours: only the address, and one of two data converters."""
    if request.param == "pydantic":
        return await Client.connect(dev_server_address, data_converter=pydantic_data_converter)
    return await Client.connect(dev_server_address)


def _wid() -> str:
    return f"bad-{uuid.uuid4().hex[:10]}"


NO_INPUT = object()


class Several(tuple):
    """More than one payload for one signal or update."""


def _args(payload: Any) -> list[Any]:
    if payload is NO_INPUT:
        return []
    return list(payload) if isinstance(payload, Several) else [payload]


@pytest.mark.parametrize(
    "payload, says",
    [
        ({}, "input: Field required"),
        ({"input": 123}, "input: Input should be a valid string"),
        ("a plain string", "payload: Input should be an object"),
        (None, "is null"),
        (NO_INPUT, "no payload"),
    ],
    ids=["empty-object", "input-not-a-string", "plain-string", "null", "no-input"],
)
async def test_a_bad_start_input_fails_the_run_with_the_reason(
    bare: Client, client: Client, tmp_path: Path, payload: Any, says: str
):
    async with Harness(client, tmp_path, ScriptedModel([text("never")])) as h:
        args = [] if payload is NO_INPUT else [payload]
        handle = await bare.start_workflow("AgentRun", *args, id=_wid(), task_queue=h.task_queue)
        res = RunResult.model_validate(await asyncio.wait_for(handle.result(), timeout=30))
        await no_task_failed(handle)
    assert res.status == "failed"
    assert res.stopped_reason == "invalid start input"
    assert res.error and res.error.startswith("start input: ") and says in res.error
    assert '"input"' in res.error  # says what was expected
    assert h.model.requests == []  # nothing ran


@pytest.mark.parametrize(
    "cli_args", [[], ["--input", "null"], ["--input", '{"agent": 7}']], ids=["none", "null", "bad"]
)
async def test_temporal_workflow_start_without_a_valid_input_fails_the_run(
    client: Client, tmp_path: Path, dev_server_address: str, cli_args: list[str]
):
    async with Harness(client, tmp_path, ScriptedModel([text("never")])) as h:
        wid = _wid()
        r = await temporal_cli(
            dev_server_address,
            "start",
            "--type",
            "AgentRun",
            "--task-queue",
            h.task_queue,
            "--workflow-id",
            wid,
            *cli_args,
        )
        assert r.returncode == 0, r.stderr
        handle = client.get_workflow_handle(wid, result_type=RunResult)
        res = await asyncio.wait_for(handle.result(), timeout=30)
        await no_task_failed(handle)
    assert res.status == "failed" and res.stopped_reason == "invalid start input"
    assert res.error and "start input" in res.error


BAD_SIGNALS: list[tuple[str, Any, str]] = [
    ("approve", NO_INPUT, "signal approve: no payload"),
    ("approve", None, "signal approve: invalid payload (is null)"),
    ("approve", {}, "tool_call_id: Field required"),
    ("approve", "call_d", "signal approve: invalid payload (is a str, not an object)"),
    ("approve", {"tool_call_id": 5, "principal_id": "alice"}, "tool_call_id: Input should be"),
    ("reject", None, "signal reject: invalid payload"),
    ("pause", [1, 2], "signal pause: invalid payload (is a list, not an object)"),
    ("resume", None, "signal resume: invalid payload"),
    ("interrupt", 123, "signal interrupt: invalid payload"),
    ("send_message", None, "signal send_message: invalid payload"),
    ("send_message", {"content": None}, "content: Input should be a valid string"),
    ("raise_budget", {"max_total_tokens": "lots"}, "max_total_tokens"),
    ("raise_budget", {"max_sandbox_seconds": "nan"}, "max_sandbox_seconds"),
    ("raise_budget", {"max_total_tokens": -5}, "max_total_tokens: Input should be greater"),
    (
        "approve",
        Several([{"tool_call_id": "call_d", "principal_id": "alice"}, {"extra": 1}]),
        "signal approve: invalid payload (2 payloads, not one)",
    ),
]


async def test_bad_signals_are_ignored_with_why_and_a_valid_approval_still_works(
    bare: Client, client: Client, tmp_path: Path
):
    async with Harness(client, tmp_path, ScriptedModel(DEPLOY), agents=GATED) as h:
        handle = await bare.start_workflow(
            "AgentRun", {"input": "deploy it"}, id=_wid(), task_queue=h.task_queue
        )
        await until_state(handle, lambda s: s.status == "awaiting_approval")
        for name, payload, _ in BAD_SIGNALS:
            await handle.signal(name, args=_args(payload))
        st = await until_state(handle, lambda s: len(s.ignored_signals) == len(BAD_SIGNALS))
        assert st.status == "awaiting_approval" and not st.paused
        for (name, _, says), ignored in zip(BAD_SIGNALS, st.ignored_signals, strict=True):
            assert ignored.signal == name
            assert says in ignored.reason, (says, ignored.reason)
        assert st.ignored_signals[4].principal_id == "alice"  # read from the bad payload
        assert st.ignored_signals[4].tool_call_id is None
        assert deployed(h) == []
        await handle.signal("approve", {"tool_call_id": "call_d", "principal_id": "alice"})
        res = RunResult.model_validate(await asyncio.wait_for(handle.result(), timeout=30))
        await no_task_failed(handle)
    assert res.status == "completed" and res.output == "deployed"
    assert deployed(h) == ["prod"]
    assert [d.principal_id for d in res.decisions] == ["alice"]
    assert len(res.ignored_signals) == len(BAD_SIGNALS)


@pytest.mark.parametrize(
    "payload, says",
    [
        (NO_INPUT, "update decide: no payload"),
        (None, "update decide: invalid payload (is null)"),
        ({"tool_call_id": "call_d"}, "decision: Field required"),
        ({"tool_call_id": "call_d", "decision": "maybe"}, "decision: Input should be"),
        ("approve", "update decide: invalid payload (is a str, not an object)"),
        (
            Several([{"tool_call_id": "call_d", "decision": "approve"}, "x"]),
            "update decide: invalid payload (2 payloads, not one)",
        ),
    ],
    ids=["no-input", "null", "no-decision", "bad-decision", "string", "two-payloads"],
)
async def test_decide_refuses_a_bad_payload_and_a_good_one_still_works(
    bare: Client, client: Client, tmp_path: Path, payload: Any, says: str
):
    async with Harness(client, tmp_path, ScriptedModel(DEPLOY), agents=GATED) as h:
        handle = await bare.start_workflow(
            "AgentRun", {"input": "deploy it"}, id=_wid(), task_queue=h.task_queue
        )
        await until_state(handle, lambda s: s.status == "awaiting_approval")
        with pytest.raises(WorkflowUpdateFailedError) as err:
            await handle.execute_update("decide", args=_args(payload))
        assert says in str(err.value.cause)
        st = RunState.model_validate(await handle.query("state"))
        assert st.status == "awaiting_approval" and st.decisions == []
        ok = await handle.execute_update(
            "decide", {"tool_call_id": "call_d", "decision": "approve", "principal_id": "alice"}
        )
        assert ok["accepted"] is True
        res = RunResult.model_validate(await asyncio.wait_for(handle.result(), timeout=30))
        await no_task_failed(handle)
    assert res.status == "completed" and deployed(h) == ["prod"]


async def test_temporal_workflow_signal_without_input_is_ignored(
    client: Client, tmp_path: Path, dev_server_address: str
):
    async with Harness(client, tmp_path, ScriptedModel(DEPLOY), agents=GATED) as h:
        handle = await h.start("deploy it")
        await until_state(handle, lambda s: s.status == "awaiting_approval")

        async def signal(name: str, *payload: str) -> None:
            args = ["--workflow-id", handle.id, "--name", name]
            r = await temporal_cli(dev_server_address, "signal", *args, *payload)
            assert r.returncode == 0, r.stderr  # the CLI accepts it: the run must cope

        sent = ["approve", "reject", "resume", "send_message", "approve", "approve"]
        for name in sent[:4]:
            await signal(name)  # no --input at all
        await signal("approve", "--input", "null")
        await signal("approve", "--input", '{"tool_call_id": "call_d"}', "--input", "{}")
        st = await until_state(handle, lambda s: len(s.ignored_signals) == len(sent))
        assert [i.signal for i in st.ignored_signals] == sent
        reasons = [i.reason for i in st.ignored_signals]
        assert all("no payload" in r for r in reasons[:4])
        assert "invalid payload (is null)" in reasons[4]
        assert "invalid payload (2 payloads, not one)" in reasons[5]
        await signal("approve", "--input", '{"tool_call_id": "call_d", "principal_id": "olga"}')
        res = await asyncio.wait_for(handle.result(), timeout=30)
        await no_task_failed(handle)
    assert res.status == "completed" and deployed(h) == ["prod"]
    assert res.decisions[0].principal_id == "olga"


async def test_a_bare_client_run_gets_search_attributes_and_is_listed(
    bare: Client, client: Client, tmp_path: Path, dev_server_address: str
):
    async with Harness(client, tmp_path, ScriptedModel([text("hello")])) as h:
        handle = await bare.start_workflow(
            "AgentRun", {"input": "say hello"}, id=_wid(), task_queue=h.task_queue
        )
        res = RunResult.model_validate(await asyncio.wait_for(handle.result(), timeout=30))
        assert res.status == "completed"
        desc = await handle.describe()
        sa = {
            k: v
            for k, v in desc.raw_description.workflow_execution_info.search_attributes.indexed_fields.items()
        }
        for name in SEARCH_ATTRIBUTES:
            assert name in sa, f"{name} not set on a bare-client run"
        query = (
            f"WorkflowId = '{handle.id}' AND AgentName = 'default' AND AgentStatus = 'completed'"
        )
        found: list[str] = []
        for _ in range(200):  # visibility is eventually consistent
            found = [wf.id async for wf in client.list_workflows(query)]
            if found:
                break
            await asyncio.sleep(0.05)
        assert found == [handle.id]
        r = await agentctl(
            "list",
            "--status",
            "completed",
            "--limit",
            "200",
            env=agentctl_env(h, dev_server_address),
        )
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith(handle.id))
    assert "agent=default" in line and "status=completed" in line
