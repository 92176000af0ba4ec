"""The benchmark scenarios. Each returns a JSON-able dict and cleans up its servers and workers.

Implementations compared: ``ours`` (``AgentRun``, built by ``workers.worker.build_worker``),
``plugin`` (the OpenAI Agents SDK on ``temporalio-openai-agents``, bench/plugin_agent.py) and,
for the overhead scenario, ``bare`` (two trivial activities per turn, bench/bare.py).
"""

from __future__ import annotations

import asyncio
import random
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from bench.evals import scenario_evals
from bench.events import count_activities, fetch_chain, model_scheduled_times, phase_breakdown, ts
from bench.infra import (
    DevServer,
    WorkerProc,
    converter_choice,
    counting_responder,
    dev_server,
    dist,
    list_closed,
    max_in_flight,
    percentile,
    spawn_worker,
    wait_all_closed,
    workdir,
    write_bench_spec,
)
from bench.machine import CpuMeter
from workers.client import start_run
from workers.config import Settings
from workers.testing.scripted_model import ScriptedModel
from workflows.models import RunRequest

MIB = 1024 * 1024
MODEL_TYPE = {"ours": "model.complete", "plugin": "invoke_model_activity", "bare": "bench.model"}
TOOL_TYPE = {"ours": "tool.invoke", "plugin": "calculator", "bare": "bench.tool"}
FAST_TRANSFER = {"history.transferProcessorMaxPollRPS": 1000}


@dataclass
class Options:
    """Command-line options every scenario sees."""

    quick: bool = False
    extended: bool = False
    log: Any = print
    baseline: str | None = None
    """Another checkout of this project: scenario ``cpu`` runs its ``AgentRun`` beside ours."""


def _err(e: BaseException) -> dict[str, Any]:
    return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=6)}


def _settings(
    model_url: str, spec: Path | None, d: Path, payload_store: str | None = None
) -> Settings:
    """Settings of the bench client; the external payload store (if any) lives in ``d``."""
    extra: dict[str, Any] = {}
    if "payload_dir" in Settings.model_fields:
        extra["payload_dir"] = str(d / "payloads")
    if payload_store and "payload_store" in Settings.model_fields:
        extra["payload_store"] = payload_store
    return Settings(
        openai_base_url=model_url,
        openai_api_key="bench",
        spec_file=str(spec) if spec else "",
        task_queue="bench",
        default_model="scripted",
        **extra,
    )


def _tq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def plugin_missing() -> str | None:
    """Why the plugin rows cannot run (package not installed), or None when they can."""
    try:
        import temporalio.openai_agents  # noqa: F401

        import agents  # noqa: F401
    except ImportError as e:
        return (
            f"temporalio-openai-agents is not installed ({e}); "
            "pip install 'temporalio-openai-agents==1.1.0' (bench/README.md)"
        )
    return None


async def _plugin_client(srv: DevServer, model_url: str) -> Client:
    from bench.plugin_agent import make_plugin

    return await Client.connect(srv.address, namespace="default", plugins=[make_plugin(model_url)])


async def _start_plugin(client: Client, task_queue: str, turns: int, wid: str | None = None) -> Any:
    from bench.plugin_agent import PluginAgentRun, PluginRequest

    return await client.start_workflow(
        PluginAgentRun.run,
        PluginRequest(input=f"turns={turns} go", max_turns=turns + 5),
        id=wid or f"plugin-{uuid.uuid4().hex}",
        task_queue=task_queue,
    )


async def _start_ours(client: Client, task_queue: str, turns: int, wid: str | None = None) -> Any:
    return await start_run(
        client,
        RunRequest(agent="bench", input=f"turns={turns} go"),
        task_queue=task_queue,
        workflow_id=wid,
    )


async def _start_hand(client: Client, task_queue: str, turns: int, wid: str | None = None) -> Any:
    from bench.handwritten import HandLoop, HandRequest

    return await client.start_workflow(
        HandLoop.run,
        HandRequest(input=f"turns={turns} go", max_turns=turns + 5),
        id=wid or f"hand-{uuid.uuid4().hex}",
        task_queue=task_queue,
    )


async def start_impl(
    impl: str, client: Client, task_queue: str, turns: int, wid: str | None = None
) -> Any:
    """Start one ``turns``-turn run of ``impl`` (``ours`` or ``baseline``, ``plugin``, ``hand``)."""
    if impl in ("ours", "baseline"):
        return await _start_ours(client, task_queue, turns, wid)
    if impl == "plugin":
        return await _start_plugin(client, task_queue, turns, wid)
    return await _start_hand(client, task_queue, turns, wid)


# =============================================================================================
# 1. History bytes per turn
# =============================================================================================


def _turn_increments(chain: list[dict[str, Any]], model_type: str) -> list[int]:
    """Bytes of history added per turn (event bytes between consecutive model steps)."""
    incs: list[int] = []
    for seg in chain:
        cum = 0
        marks: list[int] = []
        for e in seg["events"]:
            if (
                e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and e.activity_task_scheduled_event_attributes.activity_type.name == model_type
            ):
                marks.append(cum)
            cum += e.ByteSize()
        incs += [b - a for a, b in zip(marks, marks[1:], strict=False)]
    return incs


def _summarise_chain(
    chain: list[dict[str, Any]], impl: str, turns_requested: int
) -> dict[str, Any]:
    model_type = MODEL_TYPE[impl]
    segs = []
    for seg in chain:
        acts = count_activities(seg["events"])
        turns = acts.get(model_type, 0)
        times = model_scheduled_times(seg["events"], model_type)
        per_turn = [b - a for a, b in zip(times, times[1:], strict=False)]
        phases = phase_breakdown(seg["events"])
        segs.append(
            {
                "run_id": seg["run_id"],
                "events": seg["event_count"],
                "history_bytes": seg["history_size_bytes"],
                "turns": turns,
                "bytes_per_turn": round(seg["history_size_bytes"] / turns) if turns else None,
                "max_payload_bytes": seg["max_payload_bytes"],
                "activities": acts,
                "closed_as": seg["last_event"],
                "per_turn_ms_p50": round((percentile(per_turn, 50) or 0) * 1000, 1),
                "phases_ms_mean": {k: dist(v, 1000)["mean"] for k, v in sorted(phases.items())},
            }
        )
    total = sum(s["history_bytes"] for s in segs)
    turns_done = sum(s["turns"] for s in segs)
    incs = _turn_increments(chain, model_type)
    return {
        "turns_requested": turns_requested,
        "turns_done": turns_done,
        "segments": len(segs),
        "total_history_bytes": total,
        "bytes_per_turn": round(total / turns_done) if turns_done else None,
        "max_segment_bytes": max((s["history_bytes"] for s in segs), default=0),
        "all_segments_under_4mib": all(s["history_bytes"] < 4 * MIB for s in segs),
        "max_payload_bytes": max((s["max_payload_bytes"] for s in segs), default=0),
        "turn_bytes_first10": round(percentile(incs[:10], 50) or 0) if incs else None,
        "turn_bytes_last10": round(percentile(incs[-10:], 50) or 0) if incs else None,
        "segments_detail": segs,
    }


async def _history_ours(
    opts: Options, d: Path, spec: Path, model: ScriptedModel, sizes: list[int], store: str | None
) -> dict[str, Any]:
    ours: dict[str, Any] = {}
    conv, conv_desc = converter_choice(_settings(model.base_url, spec, d, store))
    ours["converter"] = conv_desc
    try:
        async with dev_server(d, data_converter=conv) as srv:
            tq = _tq("hist")
            w = spawn_worker(
                "ours",
                srv.address,
                tq,
                d,
                model_url=model.base_url,
                spec_file=spec,
                payload_dir=d / "payloads",
                payload_store=store,
                name=f"hist-{store}",
            )
            try:
                await w.wait_ready()
                for n in sizes:
                    opts.log(f"  history ours (payload store {store or 'default'}): {n} turns")
                    meter = CpuMeter({"worker": w.pid, "server": srv.pid})
                    meter.start()
                    t0 = time.monotonic()
                    h = await _start_ours(srv.client, tq, n)
                    try:
                        res = await asyncio.wait_for(h.result(), timeout=n * 1.0 + 180)
                        status, why = res.status, res.stopped_reason
                    except Exception as e:  # noqa: BLE001 - report it
                        status, why = "error", f"{type(e).__name__}: {e}"[:300]
                    wall = time.monotonic() - t0
                    cpu = meter.stop()
                    chain = await fetch_chain(
                        srv.client, h.id, h.first_execution_run_id or h.result_run_id
                    )
                    r = _summarise_chain(chain, "ours", n)
                    r.update(status=status, stopped_reason=why, wall_s=round(wall, 1), cpu=cpu)
                    ours[str(n)] = r
                    opts.log(
                        f"    -> {status}, {r['segments']} segment(s), {r['total_history_bytes']} B, "
                        f"{r['bytes_per_turn']} B/turn, max segment {r['max_segment_bytes']} B"
                    )
            finally:
                w.stop()
    except Exception as e:  # noqa: BLE001
        ours["error"] = _err(e)
    return ours


async def _history_plugin(
    opts: Options, d: Path, model: ScriptedModel, sizes: list[int]
) -> dict[str, Any]:
    plugin: dict[str, Any] = {}
    try:
        async with dev_server(d) as srv:
            tq = _tq("hist-plugin")
            w = spawn_worker(
                "plugin", srv.address, tq, d, model_url=model.base_url, name="hist-plugin"
            )
            pc: Client | None = await _plugin_client(srv, model.base_url)
            try:
                await w.wait_ready()
                for n in sizes:
                    opts.log(f"  history plugin: {n} turns")
                    meter = CpuMeter({"worker": w.pid, "server": srv.pid})
                    meter.start()
                    t0 = time.monotonic()
                    assert pc is not None
                    h = await _start_plugin(pc, tq, n)
                    try:
                        await asyncio.wait_for(h.result(), timeout=n * 1.0 + 300)
                        status, why = "completed", ""
                    except WorkflowFailureError as e:
                        status, why = "failed", f"{e.cause!r}"[:300]
                    except Exception as e:  # noqa: BLE001
                        status, why = "error", f"{type(e).__name__}: {e}"[:300]
                    wall = time.monotonic() - t0
                    cpu = meter.stop()
                    desc = await h.describe()
                    chain = await fetch_chain(pc, h.id, h.first_execution_run_id or h.result_run_id)
                    r = _summarise_chain(chain, "plugin", n)
                    r.update(
                        status=status,
                        workflow_status=desc.status.name if desc.status else None,
                        stopped_reason=why,
                        wall_s=round(wall, 1),
                        cpu=cpu,
                    )
                    plugin[str(n)] = r
                    opts.log(
                        f"    -> plugin {status} ({r['workflow_status']}), {r['turns_done']} turns, "
                        f"{r['total_history_bytes']} B, {r['bytes_per_turn']} B/turn"
                    )
                    if desc.status == WorkflowExecutionStatus.RUNNING:
                        await h.terminate("bench timeout")
            finally:
                pc = None
                w.stop()
    except Exception as e:  # noqa: BLE001
        plugin["error"] = _err(e)
    return plugin


async def scenario_history(opts: Options, inline_only: bool = False) -> dict[str, Any]:
    """Runs of 10, 100, 1,000 turns; segments, history bytes, bytes per turn.

    Ours and the plugin run at the same time (separate servers and workers): this scenario
    measures bytes, which do not depend on timing; its wall times are only indicative.
    """
    sizes = [10, 100] if opts.quick else [10, 100, 1000]
    out: dict[str, Any] = {"turn_counts": sizes, "model_latency_s": 0.0}
    with workdir("history") as d:
        spec = write_bench_spec(
            d,
            {
                "bench": {
                    "limits": {"max_turns": max(sizes) + 5, "max_seconds": 7200, "loop_window": 6}
                }
            },
        )
        with ScriptedModel(responder=counting_responder()) as model:
            (d / "ours").mkdir()
            (d / "plugin").mkdir()
            if inline_only:
                out["ours_inline"] = await _history_ours(
                    opts, d / "ours", spec, model, sizes, "none"
                )
                out["ours_inline"]["payload_store"] = "none"
                return out
            missing = plugin_missing()
            if missing:
                ours = await _history_ours(opts, d / "ours", spec, model, sizes, None)
                plugin: dict[str, Any] = {"skipped": missing}
            else:
                ours, plugin = await asyncio.gather(
                    _history_ours(opts, d / "ours", spec, model, sizes, None),
                    _history_plugin(opts, d / "plugin", model, sizes),
                )
            ours["payload_store"] = "default (AGENT_PAYLOAD_STORE unset)"
            out["converter"] = ours.get("converter")
            out["ours"] = ours
            out["plugin"] = plugin
    return out


async def scenario_history_inline(opts: Options) -> dict[str, Any]:
    """Scenario 1 for ours with every payload inline (AGENT_PAYLOAD_STORE=none)."""
    return await scenario_history(opts, inline_only=True)


# =============================================================================================
# 2. Overhead per turn
# =============================================================================================


async def _one_overhead(
    srv: DevServer, impl: str, tq: str, turns: int, worker_pid: int, model_url: str
) -> dict[str, Any]:
    client = srv.client
    pc = await _plugin_client(srv, model_url) if impl == "plugin" else None

    async def run(n: int) -> Any:
        if impl == "ours":
            h = await _start_ours(client, tq, n)
        elif impl == "plugin":
            assert pc is not None
            h = await _start_plugin(pc, tq, n)
        else:
            from bench.bare import BareTurns

            h = await client.start_workflow(
                BareTurns.run, n, id=f"bare-{uuid.uuid4().hex}", task_queue=tq
            )
        await asyncio.wait_for(h.result(), timeout=n * 2 + 60)
        return h

    await run(10)  # warm-up: caches, connections, the server's rate limiter state
    meter = CpuMeter({"worker": worker_pid, "server": srv.pid})
    meter.start()
    t0 = time.monotonic()
    h = await run(turns)
    wall = time.monotonic() - t0
    cpu = meter.stop()
    chain = await fetch_chain(pc or client, h.id, h.first_execution_run_id or h.result_run_id)
    events = [e for s in chain for e in s["events"]]
    times = model_scheduled_times(events, MODEL_TYPE[impl])
    per_turn = [b - a for a, b in zip(times, times[1:], strict=False)]
    phases = {k: dist(v, 1000, 2) for k, v in phase_breakdown(events).items()}
    n_turns = len(times)
    return {
        "turns": n_turns,
        "per_turn_ms": dist(per_turn, 1000),
        "run_wall_ms_per_turn": round(wall * 1000 / max(n_turns, 1), 1),
        "worker_cpu_ms_per_turn": round(cpu.get("worker_cpu_s", 0) * 1000 / max(n_turns, 1), 1),
        "server_cpu_ms_per_turn": round(cpu.get("server_cpu_s", 0) * 1000 / max(n_turns, 1), 1),
        "phases_ms": phases,
        "cpu": cpu,
    }


def _spawn_impl(
    impl: str,
    srv: DevServer,
    tq: str,
    d: Path,
    model: ScriptedModel,
    spec: Path,
    name: str,
    tuning: str = "ours",
) -> WorkerProc:
    """A worker of ``impl`` on ``srv``'s queue ``tq``: the bench spec and payload folder for ours."""
    return spawn_worker(
        impl,
        srv.address,
        tq,
        d,
        model_url=model.base_url,
        spec_file=spec if impl == "ours" else None,
        tuning=tuning,
        name=name,
        payload_dir=d / "payloads",
    )


async def scenario_overhead(opts: Options) -> dict[str, Any]:
    """Per-turn time with a zero-latency model: ours, bare Temporal, plugin; two server configs."""
    turns = 20 if opts.quick else 50
    out: dict[str, Any] = {"turns_per_run": turns, "model_latency_s": 0.0, "configs": {}}
    configs = [("dev_config", None), ("fast_transfer", FAST_TRANSFER)]
    with workdir("overhead") as d:
        spec = write_bench_spec(
            d, {"bench": {"limits": {"max_turns": turns + 20, "max_seconds": 3600}}}
        )
        with ScriptedModel(responder=counting_responder()) as model:
            conv, conv_desc = converter_choice(_settings(model.base_url, spec, d))
            out["converter"] = conv_desc
            for cname, dyn in configs:
                res: dict[str, Any] = {"dynamic_config_added": dyn or {}}
                try:
                    async with dev_server(d, data_converter=conv, dynamic_config=dyn) as srv:
                        for impl in ("bare", "ours", "plugin"):
                            if impl == "plugin" and plugin_missing():
                                res[impl] = {"skipped": plugin_missing()}
                                continue
                            opts.log(f"  overhead {cname}: {impl}")
                            tq = _tq(f"ovh-{impl}")
                            w = _spawn_impl(impl, srv, tq, d, model, spec, f"{impl}-{cname}")
                            try:
                                await w.wait_ready()
                                res[impl] = await _one_overhead(
                                    srv, impl, tq, turns, w.pid, model.base_url
                                )
                            except Exception as e:  # noqa: BLE001
                                res[impl] = _err(e)
                            finally:
                                w.stop()
                except Exception as e:  # noqa: BLE001
                    res["error"] = _err(e)
                out["configs"][cname] = res
    return out


# =============================================================================================
# 3 and 5. Throughput
# =============================================================================================


async def _throughput_once(
    d: Path, impl: str, n_runs: int, tuning: str, latency: float, turns: int, opts: Options
) -> dict[str, Any]:
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
                sem = asyncio.Semaphore(50)
                ids = [f"{impl}-tp-{i}-{uuid.uuid4().hex[:6]}" for i in range(n_runs)]

                async def start(wid: str) -> None:
                    async with sem:
                        if impl == "ours":
                            await _start_ours(srv.client, tq, turns, wid)
                        else:
                            assert pc is not None
                            await _start_plugin(pc, tq, turns, wid)

                await asyncio.gather(*(start(i) for i in ids))
                start_s = time.monotonic() - t0
                done, waited = await wait_all_closed(
                    srv.client, tq, n_runs, timeout=max(180.0, n_runs * 0.6)
                )
                cpu = meter.stop()
                wfs = await list_closed(srv.client, tq)
                closed = [x for x in wfs if x.close_time is not None]
                completed = [x for x in closed if x.status == WorkflowExecutionStatus.COMPLETED]
                lat = [(x.close_time - x.start_time).total_seconds() for x in completed]
                if completed:
                    first = min(x.start_time for x in wfs)
                    last = max(x.close_time for x in completed)
                    span = (last - first).total_seconds()
                else:
                    span = float("nan")
                agent_ok = None
                if impl == "ours":
                    from workflows.agent_run import SA_STATUS

                    agent_ok = sum(
                        1
                        for x in completed
                        if x.typed_search_attributes.get(SA_STATUS) == "completed"
                    )
                # Sample histories: where the time goes under load.
                sample = random.Random(1).sample(completed, min(40, len(completed)))
                phases: dict[str, list[float]] = {}
                for x in sample:
                    hist = (
                        await (pc or srv.client)
                        .get_workflow_handle(x.id, run_id=x.run_id)
                        .fetch_history()
                    )
                    for k, v in phase_breakdown(list(hist.events)).items():
                        phases.setdefault(k, []).extend(v)
                result = {
                    "runs": n_runs,
                    "tuning": tuning,
                    "all_closed": done,
                    "completed": len(completed),
                    "agent_status_completed": agent_ok,
                    "not_completed": n_runs - len(completed),
                    "start_phase_s": round(start_s, 2),
                    "span_s": round(span, 2),
                    "runs_per_s": round(len(completed) / span, 2)
                    if completed and span > 0
                    else None,
                    "run_latency_s": dist(lat, 1, 2),
                    "model_server_max_in_flight": max_in_flight(model),
                    "model_requests": model.count,
                    "phases_ms_sampled": {k: dist(v, 1000, 1) for k, v in sorted(phases.items())},
                    "cpu": cpu,
                }
                opts.log(
                    f"    -> {result['runs_per_s']} runs/s, p50 {result['run_latency_s']['p50']} s, "
                    f"p95 {result['run_latency_s']['p95']} s, completed {len(completed)}/{n_runs}, "
                    f"worker CPU {cpu.get('worker_cpu_pct')}%, server CPU {cpu.get('server_cpu_pct')}%"
                )
                return result
            finally:
                pc = None
                w.stop()


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


# =============================================================================================
# 4. Crash recovery
# =============================================================================================


async def _crash_once(
    impl: str, tuning: str, latency: float, kill_after: float, opts: Options
) -> dict[str, Any]:
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
                    h = await (
                        _start_ours(srv.client, tq, 2)
                        if impl == "ours"
                        else _start_plugin(pc, tq, 2)
                    )  # type: ignore[arg-type]
                    while model.count < 1:
                        await asyncio.sleep(0.01)
                    first = model.requests[0]
                    await asyncio.sleep(max(0.0, first.received_at + kill_after - time.monotonic()))
                    t_kill = time.monotonic()
                    w1.kill()
                    w2 = _spawn_impl(impl, srv, tq, d, model, spec, "w2", tuning)
                    startup = await w2.wait_ready()
                    deadline = time.monotonic() + 240
                    while model.count < 2 and time.monotonic() < deadline:
                        await asyncio.sleep(0.01)
                    if model.count < 2:
                        raise RuntimeError(
                            "the interrupted model call was not retried within 240 s"
                        )
                    retry = model.requests[1]
                    await asyncio.wait_for(h.result(), timeout=240)
                    t_done = time.monotonic()
                    hist = (
                        await (pc or srv.client)
                        .get_workflow_handle(h.id, run_id=h.result_run_id)
                        .fetch_history()
                    )
                    events = list(hist.events)
                    # After the retried model call completed: how long until a workflow task ran.
                    model_type = MODEL_TYPE[impl]
                    types = {}
                    sticky_wait = None
                    retried_attempt = None
                    wft_timeouts = 0
                    for e in events:
                        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                            types[e.event_id] = (
                                e.activity_task_scheduled_event_attributes.activity_type.name
                            )
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
                            and types.get(
                                e.activity_task_completed_event_attributes.scheduled_event_id
                            )
                            == model_type
                            and done_t is None
                        ):
                            done_t = ts(e)
                        elif (
                            e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED
                            and done_t is not None
                        ):
                            sticky_wait = ts(e) - done_t
                            break
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


from bench.code_mode import scenario_code_mode  # noqa: E402
from bench.cpu import scenario_cpu  # noqa: E402
from bench.encryption import scenario_encryption  # noqa: E402
from bench.memory import scenario_memory  # noqa: E402
from bench.memory_e2e import scenario_memory_e2e  # noqa: E402
from bench.models import scenario_fairness, scenario_rate_limit  # noqa: E402
from bench.peers import scenario_peers  # noqa: E402
from bench.sandbox import scenario_sandbox  # noqa: E402

SCENARIOS = {
    "peers": scenario_peers,
    "fairness": scenario_fairness,
    "rate_limit": scenario_rate_limit,
    "history": scenario_history,
    "history_inline": scenario_history_inline,
    "overhead": scenario_overhead,
    "throughput": scenario_throughput,
    "crash": scenario_crash,
    "tuning": scenario_tuning,
    "cpu": scenario_cpu,
    "encryption": scenario_encryption,
    "memory": scenario_memory,
    "memory_e2e": scenario_memory_e2e,
    "sandbox": scenario_sandbox,
    "code_mode": scenario_code_mode,
    "evals": scenario_evals,
}
