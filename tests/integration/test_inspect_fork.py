"""Forking and replaying runs (``workers.history``: fork, replay): lineage, continue-as-new chains,
externally stored payloads, through the API and ``agentctl fork``."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import ExternalStorage, StorageDriver, StorageDriverClaim
from temporalio.testing import WorkflowEnvironment

from tests.support.cli import agentctl_at
from tests.support.harness import Harness
from workers import history as ih
from workers.testing.env import start_local_env
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workflows.agent_run import SA_PARENT
from workflows.models import RunState


@pytest_asyncio.fixture(scope="module")
async def plain_env() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server without custom search attributes: runs must work there too (no listing)."""
    e = await start_local_env(search_attributes=[])
    try:
        yield e
    finally:
        await e.shutdown()


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
        bad_cli = await agentctl_at(dev_server_address, "fork", original.id, "--turn", "9")
        assert model.count == count_before_cli  # nothing started
        cli = await agentctl_at(dev_server_address, "fork", original.id, "--turn", "3", "--json")
        missing = await agentctl_at(dev_server_address, "replay", "run-does-not-exist")
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
    started = fa.timeline[0]
    assert isinstance(started, ih.RunStartedEntry) and started.seeded_messages == 4
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


async def test_a_fork_after_a_step_that_ran_tool_calls_first_seeds_their_results(
    client: Client, tmp_path: Path
):
    """calculator (local) rode step 2: its result is in the step's reply, not its input."""
    model = ScriptedModel(
        [tool_call("calculator", {"expression": "6*7"}), text("42"), text("forked 42")]
    )
    async with Harness(client, tmp_path, model) as h:
        original = await h.start("multiply")
        assert (await original.result()).status == "completed"
        points = ih.fork_points(await ih.fetch_chain(client, original.id))
        forked = await ih.fork(client, original.id, 2)
        fres = await forked.result()
    asked = model.requests[1].messages  # what the model saw at turn 2
    assert [m["content"] for m in asked if m["role"] == "tool"] == ["42"]
    assert points[2] == asked
    assert model.requests[2].messages == asked  # the fork's first request: the same
    assert fres.output == "forked 42"
