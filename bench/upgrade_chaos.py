"""``make upgrade-chaos``: a new build rolled out under load with Worker Versioning, no run lost.

``python -m bench.upgrade_chaos [--runs 200] [--deadline 900]``

A dev server (in memory, free ports), the scripted model and two builds of the worker in this
process, both under Worker Versioning (deployment ``agent-runtime``): ``v1`` runs today's
``AgentRun``; ``v2`` runs a changed one (a 1 ms timer before every model step: a change that
fails replay of any v1 history, see tests/integration/test_histories_replay.py). Runs are started
in five stages while traffic moves: v1 current; v2 ramping at 0 %; at 50 %; v2 current (100 %);
a rollback to v1; v2 current again. The runs are a mix: task runs whose ``write_file`` waits for
an approval, chat runs that wait for messages, and parent runs that ask a child agent. Approvals
(by signal or ``decide``) and the chat runs' two messages are given only once the rollout is
done, so the runs of every stage are still in flight through the later ones; chat runs then end
at their idle timeout (20 s). After the
last stage the v1 workers stay until no run is open on v1 (the drain), then stop.

It prints runs completed / total, runs per build, ``WorkflowTaskFailed`` events (a
nondeterminism error would show there), approvals lost (an approval run whose call did not run),
the ramp steps and the time v1 took to drain. Exit 0 when every run completed and nothing was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.worker import Worker

from activities.runtime import RuntimeActivities
from bench.infra import dev_server
from workers import versioning
from workers.client import start_run
from workers.config import Settings
from workers.testing.scripted_model import Reply, ScriptedModel, text, tool_call
from workers.worker import build_worker
from workflows.agent_run import AgentRun
from workflows.models import RunRequest, RunResult, RunState

KINDS = ("approval", "chat", "parent")


@workflow.defn(name="AgentRun", sandboxed=False)
class AgentRunV2(AgentRun):
    """Build v2's workflow code: a 1 ms timer before every model step (replay-incompatible)."""

    @workflow.init
    def __init__(self, raw: RawValue = None) -> None:  # pyright: ignore[reportArgumentType] - the SDK's default
        """As ``AgentRun``'s, with the model step wrapped in a timer first."""
        super().__init__(raw)
        step = self._model.step

        async def timer_first() -> Any:
            await workflow.sleep(timedelta(milliseconds=1))
            return await step()

        self._model.step = timer_first

    @workflow.run
    async def run(self, raw: RawValue = None) -> RunResult:  # pyright: ignore[reportArgumentType] - the SDK's default
        """As ``AgentRun.run``."""
        return await super().run(raw)


def responder(body: dict[str, Any]) -> Reply:
    """approval: write_file then answer; parent: ask_helper then answer; chat/helper: a line."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    after_tool = body["messages"][-1]["role"] == "tool"
    if "[approval]" in user and not after_tool:
        return tool_call("write_file", {"path": f"out-{uuid.uuid4().hex[:8]}.txt", "content": "x"})
    if "[parent]" in user and not after_tool:
        return tool_call("ask_helper", {"task": "[helper] say hi"})
    return text("done", delay=0.2)


def write_spec(d: Path) -> Path:
    """Agents: ``default`` (write_file needs approval), ``chat`` (idle 20 s), ``boss`` + ``helper``."""
    ws = d / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    base = {"model": "scripted", "system_prompt": "Upgrade chaos.", "workspace": str(ws)}
    agents = {
        "default": {**base, "tools": ["write_file"]},
        "chat": {**base, "tools": [], "idle_timeout_seconds": 20},
        "boss": {**base, "tools": [], "subagents": ["helper"]},
        "helper": {**base, "tools": []},
    }
    path = d / "agents.yml"
    path.write_text(yaml.safe_dump({"agents": agents}, sort_keys=False))
    return path


class Load:
    """Starts the runs, answers approvals and chat messages, and remembers every run's kind."""

    def __init__(self, client: Any, tq: str) -> None:
        self.client, self.tq = client, tq
        self.runs: dict[str, str] = {}  # workflow id -> kind
        self.stage_of: dict[str, str] = {}
        self.messages: Counter[str] = Counter()
        self.decided: set[str] = set()
        self.answering = False  # approvals and chat messages wait until the rollout is done

    async def start(self, n: int, stage: str) -> None:
        """Start ``n`` runs (kinds in turn), remembering the stage they started in."""
        for _ in range(n):
            kind = KINDS[len(self.runs) % 3]
            req = RunRequest(
                input=f"[{kind}] run {len(self.runs)}",
                agent={"approval": "default", "chat": "chat", "parent": "boss"}[kind],
                mode="chat" if kind == "chat" else "task",
            )
            h = await start_run(self.client, req, task_queue=self.tq)
            self.runs[h.id], self.stage_of[h.id] = kind, stage
            await asyncio.sleep(0.02)

    async def _serve(self, rid: str, kind: str) -> None:
        if not self.answering:
            return
        h = self.client.get_workflow_handle(rid)
        try:
            st = RunState.model_validate(await h.query("state"))
        except Exception:  # noqa: BLE001 - not started yet or closed
            return
        if kind == "approval":
            for p in st.pending_approvals:
                if p.tool_call_id in self.decided or random.random() < 0.5:
                    continue  # decide some later: approvals wait across the stages
                self.decided.add(p.tool_call_id)
                if random.random() < 0.5:
                    await h.signal(
                        "approve", {"tool_call_id": p.tool_call_id, "principal_id": "ops"}
                    )
                else:
                    await h.execute_update(
                        "decide",
                        {
                            "tool_call_id": p.tool_call_id,
                            "decision": "approve",
                            "principal_id": "ops",
                        },
                    )
        elif kind == "chat" and st.status == "waiting_for_message" and self.messages[rid] < 2:
            self.messages[rid] += 1
            await h.signal("send_message", {"content": f"message {self.messages[rid]}"})

    async def loop(self) -> None:
        """Every 0.5 s: decide some pending approvals, send chat messages."""
        while True:
            await asyncio.gather(
                *(self._serve(r, k) for r, k in list(self.runs.items())), return_exceptions=True
            )
            await asyncio.sleep(0.5)


async def open_on(client: Any, build: str) -> int:
    """Runs open on ``build`` (visibility; children included)."""
    return (await versioning.runs_on(client, build, limit=0))[0]


async def _until(pred: Any, timeout: float, every: float = 0.5) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if await pred():
            return True
        await asyncio.sleep(every)
    return False


async def _route(steps: list[str], label: str, fn: Any) -> None:
    """Change the routing (retried while the version is not known yet) and log the step."""
    for _ in range(50):
        try:
            await fn()
            break
        except Exception:  # noqa: BLE001 - the version registers once polled
            await asyncio.sleep(0.2)
    steps.append(label)
    print(f"[{time.strftime('%X')}] {label}", flush=True)


async def rollout(client: Any, load: Load, start_build: Any, runs: int) -> list[str]:
    """The six stages, ``runs // 6`` runs started in each (the rest in the last); the steps."""
    steps: list[str] = []
    per = runs // 6
    await start_build("v1", AgentRun)
    await _route(steps, "v1 current", lambda: versioning.set_current(client, "v1"))
    await load.start(per, "v1")
    await start_build("v2", AgentRunV2)
    await _route(steps, "v2 ramping 0%", lambda: versioning.set_ramp(client, "v2", 0))
    await load.start(per, "ramp0")
    await _route(steps, "v2 ramping 50%", lambda: versioning.set_ramp(client, "v2", 50))
    await load.start(per, "ramp50")
    await _route(steps, "v2 current (100%)", lambda: versioning.set_current(client, "v2"))
    await load.start(per, "v2")
    await _route(steps, "rollback: v1 current", lambda: versioning.rollback(client, "v1"))
    await load.start(per, "rollback")
    await _route(steps, "v2 current again (100%)", lambda: versioning.set_current(client, "v2"))
    await load.start(runs - 5 * per, "final")
    return steps


async def session(args: argparse.Namespace, d: Path) -> dict[str, Any]:
    """One session; returns the figures."""
    model = ScriptedModel(responder=responder).start()
    try:
        async with dev_server(d) as srv, contextlib.AsyncExitStack() as stack:
            client, tq = srv.client, f"upgrade-{uuid.uuid4().hex[:6]}"
            base = Settings(
                openai_base_url=model.base_url, openai_api_key="x", spec_file=str(write_spec(d)),
                task_queue=tq, default_model="scripted", worker_versioning=True, eval_worker=False,
            )  # fmt: skip
            builds: dict[str, Worker] = {}

            async def start_build(build: str, wf: type) -> None:
                s = base.model_copy(update={"build_id": build})
                rt = RuntimeActivities(s.spec_file, s.default_model)
                builds[build] = build_worker(client, s, runtime=rt, workflows=[wf])
                await stack.enter_async_context(builds[build])

            load = Load(client, tq)
            server = asyncio.ensure_future(load.loop())
            t0 = time.monotonic()
            steps = await rollout(client, load, start_build, args.runs)
            t_promoted = time.monotonic()
            in_flight = await _count(client, f'TaskQueue = "{tq}" AND ExecutionStatus = "Running"')
            load.answering = True
            drained = await _until(lambda: _zero(client, "v1"), args.deadline)
            t_drained = time.monotonic()
            await builds.pop("v1").shutdown()  # the old build's workers are replaced
            closed = await _until(lambda: _all_closed(client, list(load.runs)), args.deadline)
            server.cancel()
            figures = await collect(client, load)
            figures.update(
                in_flight_at_promotion=in_flight, steps=steps, v1_drained=drained,
                drain_seconds=round(t_drained - t_promoted, 1), all_closed=closed,
                wall_seconds=round(time.monotonic() - t0, 1),
            )  # fmt: skip
            return figures
    finally:
        model.stop()


async def _count(client: Any, query: str) -> int:
    await asyncio.sleep(1.0)  # visibility lags a little behind
    return (await client.count_workflows(query)).count


async def _zero(client: Any, build: str) -> bool:
    return await open_on(client, build) == 0


async def _all_closed(client: Any, ids: list[str]) -> bool:
    descs = await asyncio.gather(*(client.get_workflow_handle(i).describe() for i in ids))
    return all(d.close_time is not None for d in descs)


async def collect(client: Any, load: Load) -> dict[str, Any]:
    """Per run: status, build, WorkflowTaskFailed events, and whether an approval was lost."""
    status: Counter[str] = Counter()
    build: Counter[str] = Counter()
    task_failures, lost = 0, []
    for rid, kind in load.runs.items():
        h = client.get_workflow_handle(rid, result_type=RunResult)
        res = await h.result()
        status[res.status] += 1
        desc = await h.describe()
        build[
            desc.raw_description.workflow_execution_info.versioning_info.deployment_version.build_id
            or "?"
        ] += 1
        hist = await h.fetch_history()
        task_failures += sum(
            e.HasField("workflow_task_failed_event_attributes") for e in hist.events
        )
        if kind == "approval" and not any(c.status == "ok" for c in res.tool_calls):
            lost.append(rid)
    ok = status.get("completed", 0) == len(load.runs) and not lost and task_failures == 0
    return {
        "runs": len(load.runs),
        "status": dict(status),
        "by_build": dict(build),
        "workflow_task_failures": task_failures,
        "approvals_lost": lost,
        "chat_messages": sum(load.messages.values()),
        "ok": ok,
    }


def main(argv: list[str] | None = None) -> int:
    """Run one session, print the figures; exit 0 when ``ok``."""
    ap = argparse.ArgumentParser(
        prog="python -m bench.upgrade_chaos", description=(__doc__ or "").split("\n")[0]
    )
    ap.add_argument("--runs", type=int, default=200, help="runs in all (200)")
    ap.add_argument(
        "--deadline", type=float, default=900.0, help="seconds to wait for a drain (900)"
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="upgrade-chaos-") as d:
        figures = asyncio.run(session(args, Path(d)))
    for k, v in figures.items():
        print(f"{k}: {v}")
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
