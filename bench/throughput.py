"""Scenarios 3 and 5, ``throughput`` and ``tuning``: runs per second and run latency under load.

Many concurrent 5-turn runs on one worker with a 1 s model (:func:`scenario_throughput`); the
same with the worker's settings varied (:func:`scenario_tuning`).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

from bench.common import (
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
from bench.events import phase_breakdown
from bench.infra import (
    converter_choice,
    counting_responder,
    dev_server,
    dist,
    list_closed,
    max_in_flight,
    wait_all_closed,
    workdir,
    write_bench_spec,
)
from bench.machine import CpuMeter
from workers.testing.scripted_model import ScriptedModel


async def _throughput_once(
    d: Path, impl: str, n_runs: int, tuning: str, latency: float, turns: int, opts: Options
) -> dict[str, Any]:
    """``n_runs`` concurrent ``turns``-turn runs of ``impl`` on one worker with ``tuning``.

    The model answers after ``latency`` seconds; a fresh dev server and worker in ``d``. Returns
    runs/s, run latency (s), CPU of worker and server, and where the time went (sampled).
    """
    spec = write_bench_spec(d, {"bench": {"limits": {"max_turns": turns + 5, "max_seconds": 3600}}})
    with ScriptedModel(responder=counting_responder(turns), latency=latency) as model:
        conv, _ = converter_choice(_settings(model.base_url, spec, d))
        async with dev_server(d, data_converter=conv if impl == "ours" else None) as srv:
            tq = _tq(f"tp-{impl}")
            w = _spawn_impl(impl, srv, tq, d, model, spec, f"tp-{impl}-{tuning}-{n_runs}", tuning)
            pc = await _plugin_client(srv, model.base_url) if impl == "plugin" else None
            try:
                await w.wait_ready()
                meter = CpuMeter({"worker": w.pid, "server": srv.pid})
                meter.start()
                t0 = time.monotonic()
                await _start_runs(impl, srv.client, pc, tq, n_runs, turns)
                start_s = time.monotonic() - t0
                done, _waited = await wait_all_closed(
                    srv.client, tq, n_runs, timeout=max(180.0, n_runs * 0.6)
                )
                cpu = meter.stop()
                wfs = await list_closed(srv.client, tq)
                result = await _throughput_result(
                    impl, n_runs, tuning, done, start_s, wfs, pc or srv.client, model, cpu
                )
                opts.log(
                    f"    -> {result['runs_per_s']} runs/s, p50 {result['run_latency_s']['p50']} s, "
                    f"p95 {result['run_latency_s']['p95']} s, completed {result['completed']}/{n_runs}, "
                    f"worker CPU {cpu.get('worker_cpu_pct')}%, server CPU {cpu.get('server_cpu_pct')}%"
                )
                return result
            finally:
                pc = None
                w.stop()


async def _start_runs(
    impl: str, client: Client, pc: Client | None, tq: str, n_runs: int, turns: int
) -> None:
    """Start ``n_runs`` runs of ``impl`` on ``tq`` at once, at most 50 start calls in flight.

    Ours through ``client``, the plugin through its own client ``pc``.
    """
    sem = asyncio.Semaphore(50)
    ids = [f"{impl}-tp-{i}-{uuid.uuid4().hex[:6]}" for i in range(n_runs)]

    async def start(wid: str) -> None:
        async with sem:
            if impl == "ours":
                await _start_ours(client, tq, turns, wid)
            else:
                assert pc is not None
                await _start_plugin(pc, tq, turns, wid)

    await asyncio.gather(*(start(i) for i in ids))


async def _throughput_result(
    impl: str,
    n_runs: int,
    tuning: str,
    done: bool,
    start_s: float,
    wfs: list[Any],
    history_client: Client,
    model: ScriptedModel,
    cpu: dict[str, Any],
) -> dict[str, Any]:
    """The figures of one throughput measurement from its executions ``wfs`` (visibility).

    Runs/s over the span from the first start to the last close, run latency (s), the model's
    most requests in flight, and the phases (ms) of 40 histories fetched with ``history_client``.
    """
    closed = [x for x in wfs if x.close_time is not None]
    completed = [x for x in closed if x.status == WorkflowExecutionStatus.COMPLETED]
    lat = [(x.close_time - x.start_time).total_seconds() for x in completed]
    if completed:
        first = min(x.start_time for x in wfs)
        last = max(x.close_time for x in completed)
        span = (last - first).total_seconds()
    else:
        span = float("nan")
    agent_ok = _agent_status_completed(completed) if impl == "ours" else None
    phases = await _sampled_phases(history_client, completed)
    return {
        "runs": n_runs,
        "tuning": tuning,
        "all_closed": done,
        "completed": len(completed),
        "agent_status_completed": agent_ok,
        "not_completed": n_runs - len(completed),
        "start_phase_s": round(start_s, 2),
        "span_s": round(span, 2),
        "runs_per_s": round(len(completed) / span, 2) if completed and span > 0 else None,
        "run_latency_s": dist(lat, 1, 2),
        "model_server_max_in_flight": max_in_flight(model),
        "model_requests": model.count,
        "phases_ms_sampled": {k: dist(v, 1000, 1) for k, v in sorted(phases.items())},
        "cpu": cpu,
    }


def _agent_status_completed(completed: list[Any]) -> int:
    """How many of our completed runs say ``completed`` in their agent status search attribute."""
    from workflows.agent_run import SA_STATUS

    return sum(1 for x in completed if x.typed_search_attributes.get(SA_STATUS) == "completed")


async def _sampled_phases(client: Client, completed: list[Any]) -> dict[str, list[float]]:
    """Seconds per phase over 40 sampled histories of ``completed``: where the time goes under load."""
    sample = random.Random(1).sample(completed, min(40, len(completed)))
    phases: dict[str, list[float]] = {}
    for x in sample:
        hist = await client.get_workflow_handle(x.id, run_id=x.run_id).fetch_history()
        for k, v in phase_breakdown(list(hist.events)).items():
            phases.setdefault(k, []).extend(v)
    return phases


async def scenario_throughput(opts: Options) -> dict[str, Any]:
    """Concurrent 5-turn runs, 1 s model latency, one worker: runs/s and run latency."""
    levels = [100] if opts.quick else [100, 500, 1000]
    out: dict[str, Any] = {
        "levels": levels,
        "turns_per_run": 5,
        "model_latency_s": 1.0,
        "tuning": "ours",
    }
    for impl in ("ours", "plugin"):
        res: dict[str, Any] = {}
        if impl == "plugin" and plugin_missing():
            out[impl] = {str(n): {"skipped": plugin_missing()} for n in levels}
            continue
        for n in levels:
            opts.log(f"  throughput {impl}: {n} runs")
            with workdir(f"tp-{impl}-{n}") as d:
                try:
                    res[str(n)] = await _throughput_once(d, impl, n, "ours", 1.0, 5, opts)
                except Exception as e:  # noqa: BLE001
                    res[str(n)] = _err(e)
        out[impl] = res
    return out


async def scenario_tuning(opts: Options, reuse: dict[str, Any] | None = None) -> dict[str, Any]:
    """Scenario 3 at 500 runs with WorkerTuning vs SDK defaults.

    ``--extended`` adds autoscaling pollers and the plugin on SDK defaults; full mode also runs
    300 two-turn runs of a slow (5 s) model, where activity slots rather than CPU are the limit.
    """
    n = 100 if opts.quick else 500
    out: dict[str, Any] = {
        "runs": n,
        "turns_per_run": 5,
        "model_latency_s": 1.0,
        "ours": {},
        "plugin": {},
    }
    plan = [("ours", "ours"), ("ours", "sdk")]
    if opts.extended:
        plan += [("ours", "autoscale"), ("plugin", "sdk")]
    for impl, tuning in plan:
        prev = (reuse or {}).get(impl, {}).get(str(n)) if tuning == "ours" else None
        if prev and "error" not in prev:
            out[impl][tuning] = {**prev, "reused_from": "throughput"}
            continue
        if impl == "plugin" and plugin_missing():
            out[impl][tuning] = {"skipped": plugin_missing()}
            continue
        opts.log(f"  tuning {impl}/{tuning}: {n} runs")
        with workdir(f"tune-{impl}-{tuning}") as d:
            try:
                out[impl][tuning] = await _throughput_once(d, impl, n, tuning, 1.0, 5, opts)
            except Exception as e:  # noqa: BLE001
                out[impl][tuning] = _err(e)
    if not opts.quick:
        # Slow model calls: where activity slots, not CPU, are the limit (SDK default: 100).
        slow: dict[str, Any] = {"runs": 300, "turns_per_run": 2, "model_latency_s": 5.0}
        for tuning in ("ours", "sdk"):
            opts.log(f"  tuning ours/{tuning}: 300 runs, 2 turns, model latency 5 s")
            with workdir(f"tune-slow-{tuning}") as d:
                try:
                    slow[tuning] = await _throughput_once(d, "ours", 300, tuning, 5.0, 2, opts)
                except Exception as e:  # noqa: BLE001
                    slow[tuning] = _err(e)
        out["slow_model"] = slow
    return out
