"""Scenario 4, ``crash``: seconds until a run moves again after its worker is SIGKILLed.

The worker is killed during a model call and a new one started; the scripted model records when
the interrupted call arrives again (:func:`scenario_crash`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.common import (
    MODEL_TYPE,
    Options,
    _err,
    _plugin_client,
    _settings,
    _spawn_impl,
    _start_ours,
    _start_plugin,
    _tq,
    plugin_missing,
)
from bench.events import ts
from bench.infra import (
    converter_choice,
    counting_responder,
    dev_server,
    workdir,
    write_bench_spec,
)
from workers.testing.scripted_model import ScriptedModel


async def _crash_once(
    impl: str, tuning: str, latency: float, kill_after: float, opts: Options
) -> dict[str, Any]:
    """SIGKILL a worker of ``impl`` ``kill_after`` s into a ``latency`` s model call; start another.

    Returns seconds: kill to retry, the new worker's start-up, its start to the retried model call
    (``recovery_s``), the retried call's completion to the next workflow task, kill to run done.
    """
    with workdir(f"crash-{impl}") as d:
        spec = write_bench_spec(d, {"bench": {"limits": {"max_turns": 10, "max_seconds": 3600}}})
        with ScriptedModel(responder=counting_responder(2), latency=latency) as model:
            conv, _ = converter_choice(_settings(model.base_url, spec, d))
            async with dev_server(d, data_converter=conv if impl == "ours" else None) as srv:
                tq = _tq(f"crash-{impl}")
                w1 = _spawn_impl(impl, srv, tq, d, model, spec, "w1", tuning)
                w2 = None
                pc = await _plugin_client(srv, model.base_url) if impl == "plugin" else None
                try:
                    await w1.wait_ready()
                    if impl == "ours":
                        h = await _start_ours(srv.client, tq, 2)
                    else:
                        assert pc is not None  # impl == "plugin"
                        h = await _start_plugin(pc, tq, 2)
                    while model.count < 1:
                        await asyncio.sleep(0.01)
                    first = model.requests[0]
                    await asyncio.sleep(max(0.0, first.received_at + kill_after - time.monotonic()))
                    t_kill = time.monotonic()
                    w1.kill()
                    w2 = _spawn_impl(impl, srv, tq, d, model, spec, "w2", tuning)
                    startup = await w2.wait_ready()
                    retry = await _retried_request(model)
                    await asyncio.wait_for(h.result(), timeout=240)
                    t_done = time.monotonic()
                    retried_attempt, sticky_wait, wft_timeouts = await _after_the_kill(
                        pc or srv.client, h, MODEL_TYPE[impl]
                    )
                    return {
                        "model_latency_s": latency,
                        "killed_after_s": round(t_kill - first.received_at, 2),
                        "worker_startup_s": round(startup, 2),
                        "recovery_s": round(retry.received_at - w2.started_mono, 2),
                        "kill_to_retry_s": round(retry.received_at - t_kill, 2),
                        "retry_attempt": retried_attempt,
                        "result_to_next_workflow_task_s": round(sticky_wait, 2)
                        if sticky_wait is not None
                        else None,
                        "workflow_task_timeouts": wft_timeouts,
                        "kill_to_run_completed_s": round(t_done - t_kill, 2),
                        "tuning": tuning,
                    }
                finally:
                    pc = None
                    w1.kill()
                    if w2 is not None:
                        w2.stop()


async def _retried_request(model: ScriptedModel) -> Any:
    """The model's second request (the interrupted call, retried); raises after 240 s without."""
    deadline = time.monotonic() + 240
    while model.count < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    if model.count < 2:
        raise RuntimeError("the interrupted model call was not retried within 240 s")
    return model.requests[1]


async def _after_the_kill(
    client: Client, h: Any, model_type: str
) -> tuple[int | None, float | None, int]:
    """``(retried attempt, seconds, workflow task timeouts)`` from the history of the crashed run.

    The attempt of the first model call started again (attempt > 1); the seconds from the first
    model call's completion until a workflow task started (how long its result waited).
    """
    hist = await client.get_workflow_handle(h.id, run_id=h.result_run_id).fetch_history()
    events = list(hist.events)
    types = {}
    sticky_wait = None
    retried_attempt = None
    wft_timeouts = 0
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            types[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            wft_timeouts += 1
    done_t = None
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            a = e.activity_task_started_event_attributes
            if (
                types.get(a.scheduled_event_id) == model_type
                and a.attempt > 1
                and retried_attempt is None
            ):
                retried_attempt = a.attempt
        if (
            e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
            and types.get(e.activity_task_completed_event_attributes.scheduled_event_id)
            == model_type
            and done_t is None
        ):
            done_t = ts(e)
        elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and done_t is not None:
            sticky_wait = ts(e) - done_t
            break
    return retried_attempt, sticky_wait, wft_timeouts


async def scenario_crash(opts: Options) -> dict[str, Any]:
    """SIGKILL the worker during a 6 s model call; seconds until the run moves again."""
    out: dict[str, Any] = {"model_latency_s": 6.0, "kill_after_s": 3.0}
    opts.log("  crash ours (WorkerTuning)")
    try:
        out["ours"] = await _crash_once("ours", "ours", 6.0, 3.0, opts)
    except Exception as e:  # noqa: BLE001
        out["ours"] = _err(e)
    if plugin_missing():
        out["plugin"] = {"skipped": plugin_missing()}
    elif opts.quick:
        out["plugin"] = {
            "skipped": "--quick (about 70 s: the plugin's 60 s start-to-close timeout)"
        }
    else:
        opts.log("  crash plugin (plugin defaults, SDK worker defaults)")
        try:
            out["plugin"] = await _crash_once("plugin", "sdk", 6.0, 3.0, opts)
        except Exception as e:  # noqa: BLE001
            out["plugin"] = _err(e)
    return out
