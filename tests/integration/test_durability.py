"""Durability: a worker process killed mid-run, and replay of recorded histories."""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from tests.support.harness import Harness, through_a_worker_crash
from tests.support.tools import journal_events
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workflows.agent_run import AgentRun

ROOT = Path(__file__).resolve().parents[2]


async def test_worker_killed_mid_run_run_completes_without_rerunning_completed_activities(
    client: Client, dev_server_address: str, tmp_path: Path
):
    model = ScriptedModel(
        [
            tool_call("record", {"label": "before"}),
            tool_call("slow_echo", {"text": "long", "seconds": 4}),
            tool_call("record", {"label": "after"}),
            text("finished"),
        ]
    )
    async with Harness(client, tmp_path, model, worker=False) as h:
        res = await through_a_worker_crash(
            h,
            dev_server_address,
            tmp_path / "worker.log",
            start=lambda: h.start("survive a crash"),
            crash_when=lambda: any(e.get("phase") == "start" for e in journal_events(h.journal)),
            finish=lambda handle: asyncio.wait_for(handle.result(), timeout=90),
        )
    assert res.status == "completed", res
    assert res.output == "finished"
    events = journal_events(h.journal)
    records = [e["label"] for e in events if e["tool"] == "record"]
    assert records == [
        "before",
        "after",
    ]  # the completed activity before the crash did not run again
    echo = [e["phase"] for e in events if e["tool"] == "slow_echo"]
    assert echo.count("end") == 1  # the interrupted call ran to completion once, on the new worker


async def test_recorded_history_replays(client: Client, tmp_path: Path):
    model = ScriptedModel(
        [
            tool_call("read_file", {"path": "README.md"}),
            tool_call("calculator", {"expression": "6*7"}),
            text("42"),
        ]
    )
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("replay me")
        res = await handle.result()
        assert res.status == "completed"
        history = await handle.fetch_history()
    replayer = Replayer(workflows=[AgentRun], data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None


async def test_attempts_lost_with_workers_do_not_use_up_the_model_steps_limit(
    client: Client, dev_server_address: str, tmp_path: Path
):
    """Issue #35: a step whose every attempt died with its worker failed the run at
    ``model_max_attempts``; now only the model's own failures count."""
    import os
    import signal

    from tests.support.harness import spawn_worker_process

    slow = text("never seen").with_delay(60)  # the worker dies while it waits for this
    model = ScriptedModel([slow, slow, slow, text("made it")])
    agents = {"default": {"model_max_attempts": 2}}
    async with Harness(client, tmp_path, model, agents=agents, worker=False) as h:
        log = tmp_path / "worker.log"
        workers = [spawn_worker_process(h, dev_server_address, log)]
        try:
            handle = await h.start("outlive three workers")
            for lost in range(1, 4):  # three attempts lost: more than the limit of 2
                while model.count < lost:
                    await asyncio.sleep(0.1)
                os.killpg(workers[-1].pid, signal.SIGKILL)
                workers[-1].wait()
                workers.append(spawn_worker_process(h, dev_server_address, log))
            res = await asyncio.wait_for(handle.result(), timeout=90)
        finally:
            for w in workers:
                if w.poll() is None:
                    w.send_signal(signal.SIGTERM)
                    w.wait(timeout=30)
    assert res.status == "completed" and res.output == "made it", res
    assert model.count == 4
