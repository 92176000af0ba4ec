"""Scenario 1, ``history``: history bytes per turn, segments and payloads of long runs.

Runs of 10, 100 and 1,000 turns of ours and the plugin; the whole continue-as-new chain of each is
fetched and measured (:func:`scenario_history`). ``history_inline`` does the same for ours with
every payload inline (``AGENT_PAYLOAD_STORE=none``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError

from bench.common import (
    MODEL_TYPE,
    Options,
    _err,
    _plugin_client,
    _settings,
    _start_ours,
    _start_plugin,
    _tq,
    plugin_missing,
)
from bench.events import count_activities, fetch_chain, model_scheduled_times, phase_breakdown
from bench.infra import (
    converter_choice,
    counting_responder,
    dev_server,
    dist,
    percentile,
    spawn_worker,
    workdir,
    write_bench_spec,
)
from bench.machine import CpuMeter
from workers.testing.scripted_model import ScriptedModel

MIB = 1024 * 1024


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
