"""``RunContext.emit`` is called at every point of docs/contract.md's "Event stream" table, in order.

A subclass records the calls in a list outside the run state and shows them through a query.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RawValue

from tests.support.harness import Harness, until_state
from tests.support.people import GATED
from workers.client import decide
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workers.worker import build_worker
from workflows.agent_run import AgentRun
from workflows.models import RunResult


@workflow.defn(name="AgentRun", sandboxed=False)  # no re-import of this test module
class RecordingRun(AgentRun):
    """The real workflow, with every ``emit`` call kept in a list."""

    @workflow.init
    def __init__(self, raw: RawValue = None) -> None:  # pyright: ignore[reportArgumentType] - the SDK's default
        super().__init__(raw)
        self.emitted: list[dict[str, Any]] = []
        self._ctx.emit = self._record

    @workflow.run
    async def run(self, raw: RawValue = None) -> RunResult:  # pyright: ignore[reportArgumentType] - the SDK's default
        return await super().run(raw)

    def _record(self, type: str, **fields: Any) -> None:
        self.emitted.append({"type": type, **fields})

    @workflow.query(name="emitted")
    def emitted_query(self) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in e.items() if k in ("type", "status", "name", "decision")}
            for e in self.emitted
        ]


async def test_every_event_of_the_contract_is_emitted_in_order(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [
            tool_call("record", {"label": "x"}, id="call_r"),
            tool_call("deploy", {"target": "prod"}, id="call_d"),
            text("done"),
        ]
    )
    async with Harness(client, tmp_path, model, agents=GATED, worker=False) as h:
        worker = build_worker(client, h.settings, workflows=[RecordingRun])
        async with worker:
            handle = await h.start("go")
            await until_state(handle, lambda s: s.status == "awaiting_approval")
            await decide(client, handle.id, "call_d", "approve", "alice")
            res = await asyncio.wait_for(handle.result(), timeout=30)
            emitted = await handle.query("emitted")
    assert res.status == "completed"
    types = [e["type"] for e in emitted]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert types.count("model_started") == types.count("model_finished") == 3
    assert [e.get("name") for e in emitted if e["type"] == "tool_started"] == ["record", "deploy"]
    assert [e.get("name") for e in emitted if e["type"] == "tool_finished"] == ["record", "deploy"]
    assert types.index("approval_requested") < types.index("approval_decided")
    decided = next(e for e in emitted if e["type"] == "approval_decided")
    assert decided["decision"] == "approve" and decided["name"] == "deploy"
    statuses = [e["status"] for e in emitted if e["type"] == "status"]
    changes = [st for i, st in enumerate(statuses) if i == 0 or st != statuses[i - 1]]
    assert changes == ["running", "awaiting_approval", "running", "completed"]  # RunEvents dedups
    # the approved call runs after the decision; the answer ends the run
    assert types.index("approval_decided") < max(
        i for i, t in enumerate(types) if t == "tool_started"
    )
