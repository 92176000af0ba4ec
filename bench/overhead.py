"""Scenario 2, ``overhead``: time and CPU per turn with a zero-latency model.

Ours, the plugin and bare Temporal (two trivial activities per turn, bench/bare.py), on the dev
server as shipped and with a faster transfer queue (:data:`FAST_TRANSFER`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

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
from bench.events import fetch_chain, model_scheduled_times, phase_breakdown
from bench.infra import (
    DevServer,
    converter_choice,
    counting_responder,
    dev_server,
    dist,
    workdir,
    write_bench_spec,
)
from bench.machine import CpuMeter
from workers.testing.scripted_model import ScriptedModel

FAST_TRANSFER = {"history.transferProcessorMaxPollRPS": 1000}


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
