"""Scenario ``peers``: ours beside the OpenAI Agents plugin and a hand-written loop, as a whole run.

The table issue #23 asks for, from one invocation:

* **throughput** at 100 and 300 concurrent 5-turn runs (the model answers after 1 s; a calculator
  call per turn), one worker per implementation, each on its own fresh dev server, one after the
  other: runs per second (first start to last close), the Temporal server's and the worker's CPU
  (/proc, user + system) divided by the runs;
* **per turn**: ten 20-turn runs with a zero-latency model, one at a time: history bytes per turn
  and server CPU per turn;
* **where the server's time goes**, from 40 sampled histories per throughput level: events per run
  by type, commands per run, workflow tasks, sticky-queue misses (workflow tasks scheduled on the
  normal queue after the first), workflow task timeouts, payload bytes by event type;
* **Temporal Cloud actions per run**, counted from the histories by
  :func:`workers.history.billable_actions` (``agentctl audit`` prints the same count).

``BENCH_PEERS_IMPLS=ours,hand`` limits the implementations (to iterate on one; the table then lacks
the others). Implementations: ``ours`` (``AgentRun`` as shipped), ``plugin`` (bench/plugin_agent.py, the plugin's
defaults), ``hand`` (bench/handwritten.py, what a team writes without a runtime).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, TaskQueueKind
from temporalio.client import Client, WorkflowExecutionStatus

from bench.common import (
    Options,
    _err,
    _plugin_client,
    _settings,
    plugin_missing,
    start_impl,
)
from bench.events import fetch_chain
from bench.infra import (
    DevServer,
    converter_choice,
    counting_responder,
    dev_server,
    dist,
    list_closed,
    spawn_worker,
    wait_all_closed,
    workdir,
    write_bench_spec,
)
from bench.machine import CpuMeter
from workers.history import billable_actions
from workers.testing.scripted_model import ScriptedModel

TURNS = 5
LONG_TURNS = 20
IMPLS = ("ours", "plugin", "hand")

# Event types that a command of the worker creates (one command each).
_COMMAND_EVENTS = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    EventType.EVENT_TYPE_TIMER_STARTED,
    EventType.EVENT_TYPE_TIMER_CANCELED,
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED,
    EventType.EVENT_TYPE_MARKER_RECORDED,
    EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
    EventType.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
    EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED,
}


def _name(et: EventType.ValueType) -> str:
    return EventType.Name(et).removeprefix("EVENT_TYPE_")


def history_profile(events: list[Any]) -> dict[str, Any]:
    """What one execution asked of the server: events and commands by type, tasks, payload bytes.

    * ``events``: count per event type; ``commands``: events a worker command created;
    * ``workflow_tasks``: workflow tasks completed; ``sticky_misses``: workflow tasks scheduled
      on the normal queue after the first (the sticky queue was not used);
      ``workflow_task_timeouts``, ``workflow_task_failures``;
    * ``payload_bytes``: bytes of every payload, by the event type that carries it;
    * ``history_bytes``: serialized size of all events.
    """
    by_type: dict[str, int] = {}
    payload: dict[str, int] = {}
    commands = 0
    wft_normal = 0
    for e in events:
        et = e.event_type
        by_type[_name(et)] = by_type.get(_name(et), 0) + 1
        if et in _COMMAND_EVENTS:
            commands += 1
        if et == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            kind = e.workflow_task_scheduled_event_attributes.task_queue.kind
            if kind != TaskQueueKind.TASK_QUEUE_KIND_STICKY:
                wft_normal += 1
        size = sum(p.ByteSize() for p in _payloads(e))
        if size:
            payload[_name(et)] = payload.get(_name(et), 0) + size
    return {
        "events": by_type,
        "event_count": len(events),
        "commands": commands,
        "workflow_tasks": by_type.get("WORKFLOW_TASK_COMPLETED", 0),
        "sticky_misses": max(0, wft_normal - 1),
        "workflow_task_timeouts": by_type.get("WORKFLOW_TASK_TIMED_OUT", 0),
        "workflow_task_failures": by_type.get("WORKFLOW_TASK_FAILED", 0),
        "payload_bytes": payload,
        "history_bytes": sum(e.ByteSize() for e in events),
    }


def _payloads(event: Any) -> list[Any]:
    """Every payload one event carries (inputs, results, details, headers, memo, markers)."""
    out: list[Any] = []
    which = event.WhichOneof("attributes")
    if not which:
        return out
    attrs = getattr(event, which)
    for fd, value in attrs.ListFields():
        tn = fd.message_type.name if fd.message_type else ""
        if tn == "Payloads":
            out += list(value.payloads)
        elif tn == "Payload":
            out.append(value)
        elif tn in ("Header", "Memo", "SearchAttributes"):
            out += list(getattr(value, "fields", getattr(value, "indexed_fields", {})).values())
        elif fd.message_type and fd.message_type.GetOptions().map_entry:
            for v in value.values():
                if hasattr(v, "payloads"):
                    out += list(v.payloads)
        elif tn == "Failure":
            out.append(value)
    return out


def _mean_profile(profiles: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-run means over sampled histories."""
    n = max(1, len(profiles))

    def mean_map(key: str) -> dict[str, float]:
        acc: dict[str, float] = {}
        for p in profiles:
            for k, v in p[key].items():
                acc[k] = acc.get(k, 0) + v
        return {k: round(v / n, 1) for k, v in sorted(acc.items(), key=lambda kv: -kv[1])}

    out: dict[str, Any] = {"sampled_runs": len(profiles)}
    for k in ("event_count", "commands", "workflow_tasks", "sticky_misses",
              "workflow_task_timeouts", "workflow_task_failures", "history_bytes"):  # fmt: skip
        out[k] = round(sum(p[k] for p in profiles) / n, 1)
    out["events"] = mean_map("events")
    out["payload_bytes"] = mean_map("payload_bytes")
    out["actions"] = mean_map("actions")
    return out


def _spec_extra() -> dict[str, Any]:
    """``BENCH_PEERS_SPEC``: JSON merged into our agent's spec.

    E.g. ``{"tools": [{"name": "calculator", "local": false}]}`` to measure what local tools buy.
    """
    return json.loads(os.environ.get("BENCH_PEERS_SPEC") or "{}")


async def _profiles(client: Client, runs: list[Any]) -> list[dict[str, Any]]:
    out = []
    for x in runs:
        chain = await fetch_chain(client, x.id, x.run_id)
        events = [e for c in chain for e in c["events"]]
        p = history_profile(events)
        p["actions"] = {}
        for c in chain:
            for k, v in billable_actions(c["events"]).items():
                p["actions"][k] = p["actions"].get(k, 0) + v
        out.append(p)
    return out


class _Impl:
    """One implementation on one fresh dev server: its worker and the client that starts runs."""

    def __init__(self, impl: str, srv: DevServer, d: Path, model: ScriptedModel, spec: Path):
        self.impl, self.srv = impl, srv
        self.tq = f"peers-{impl}-{uuid.uuid4().hex[:6]}"
        self.worker = spawn_worker(
            impl, srv.address, self.tq, d, model_url=model.base_url,
            spec_file=spec if impl == "ours" else None, name=f"peers-{impl}",
            payload_dir=d / "payloads", tuning="ours" if impl == "ours" else "sdk",
        )  # fmt: skip
        self.client: Client = srv.client
        self._model_url = model.base_url

    async def ready(self) -> None:
        await self.worker.wait_ready(120)
        if self.impl == "plugin":
            self.client = await _plugin_client(self.srv, self._model_url)


@asynccontextmanager
async def _on_fresh_server(
    d: Path, impl: str, turns: int, latency: float
) -> AsyncIterator[tuple[_Impl, CpuMeter]]:
    """``impl``'s worker on a fresh dev server, with a scripted model of ``turns`` turns.

    The model answers after ``latency`` seconds. Yields the implementation and an unstarted
    meter of the worker's and the server's CPU.
    """
    limits = {"max_turns": turns + 5, "max_seconds": 3600}
    spec = write_bench_spec(d, {"bench": {"limits": limits, **_spec_extra()}})
    with ScriptedModel(responder=counting_responder(turns), latency=latency) as model:
        conv, _ = converter_choice(_settings(model.base_url, spec, d))
        async with dev_server(d, data_converter=conv if impl == "ours" else None) as srv:
            it = _Impl(impl, srv, d, model, spec)
            try:
                await it.ready()
                yield it, CpuMeter({"worker": it.worker.pid, "server": srv.pid})
            finally:
                it.worker.stop()


async def _throughput(d: Path, impl: str, n_runs: int, opts: Options) -> dict[str, Any]:
    """``n_runs`` runs started at once (50 start calls in flight): runs/s, CPU, profile."""
    async with _on_fresh_server(d, impl, TURNS, 1.0) as (it, meter):
        meter.start()
        sem = asyncio.Semaphore(50)
        ids = [f"{impl}-{n_runs}-{i}-{uuid.uuid4().hex[:6]}" for i in range(n_runs)]

        async def start(wid: str) -> None:
            async with sem:
                await start_impl(impl, it.client, it.tq, TURNS, wid)

        await asyncio.gather(*(start(i) for i in ids))
        done, _ = await wait_all_closed(it.srv.client, it.tq, n_runs, max(240.0, n_runs))
        cpu = meter.stop()
        wfs = await list_closed(it.srv.client, it.tq)
        completed = [x for x in wfs if x.status == WorkflowExecutionStatus.COMPLETED]
        sample = random.Random(1).sample(completed, min(40, len(completed)))
        prof = _mean_profile(await _profiles(it.client, sample))
    res = _throughput_result(n_runs, done, wfs, completed, cpu, prof)
    opts.log(
        f"    {impl} {n_runs}: {res['runs_per_s']} runs/s, server "
        f"{res['server_cpu_ms_per_run']} ms/run, worker {res['worker_cpu_ms_per_run']}"
        f" ms/run, actions {prof['actions'].get('total')}/run, "
        f"{res['completed']}/{n_runs} completed"
    )
    return res


def _throughput_result(
    n_runs: int, done: bool, wfs: list[Any], completed: list[Any], cpu: dict[str, Any],
    prof: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """Runs/s from the first start to the last close, latencies, CPU per completed run."""
    span = float("nan")
    if completed:
        first = min(x.start_time for x in wfs)
        span = (max(x.close_time for x in completed) - first).total_seconds()
    lat = [(x.close_time - x.start_time).total_seconds() for x in completed]
    ok = len(completed)

    def per_run(key: str) -> float | None:
        return round(cpu.get(key, 0) * 1000 / ok, 1) if ok else None

    return {
        "runs": n_runs,
        "all_closed": done,
        "completed": ok,
        "span_s": round(span, 2),
        "runs_per_s": round(ok / span, 2) if ok and span > 0 else None,
        "run_latency_s": dist(lat, 1, 2),
        "server_cpu_ms_per_run": per_run("server_cpu_s"),
        "worker_cpu_ms_per_run": per_run("worker_cpu_s"),
        "cpu": cpu,
        "profile": prof,
    }


async def _per_turn(d: Path, impl: str, runs: int, opts: Options) -> dict[str, Any]:
    """``runs`` 20-turn runs one at a time, zero-latency model: bytes and server CPU per turn."""
    async with _on_fresh_server(d, impl, LONG_TURNS, 0.0) as (it, meter):
        h = await start_impl(impl, it.client, it.tq, LONG_TURNS, f"{impl}-warm")
        await asyncio.wait_for(h.result(), 300)
        meter.start()
        handles = []
        for i in range(runs):
            h = await start_impl(impl, it.client, it.tq, LONG_TURNS, f"{impl}-long-{i}")
            await asyncio.wait_for(h.result(), 300)
            handles.append(h)
        cpu = meter.stop()
        total_bytes = 0
        for h in handles:
            chain = await fetch_chain(it.client, h.id, h.first_execution_run_id)
            total_bytes += sum(c["history_size_bytes"] for c in chain)
    turns = runs * LONG_TURNS
    res = {
        "runs": runs,
        "turns_per_run": LONG_TURNS,
        "history_bytes_per_turn": round(total_bytes / turns),
        "server_cpu_ms_per_turn": round(cpu.get("server_cpu_s", 0) * 1000 / turns, 1),
        "worker_cpu_ms_per_turn": round(cpu.get("worker_cpu_s", 0) * 1000 / turns, 1),
    }
    opts.log(
        f"    {impl} per turn: {res['history_bytes_per_turn']} B, server "
        f"{res['server_cpu_ms_per_turn']} ms, worker {res['worker_cpu_ms_per_turn']} ms"
    )
    return res


def _ratios(out: dict[str, Any]) -> dict[str, Any]:
    """Ours over the plugin and over the hand-written loop, per figure."""

    def get(impl: str, *path: str) -> float | None:
        node: Any = out.get(impl)
        for p in path:
            node = node.get(p) if isinstance(node, dict) else None
        return node if isinstance(node, (int, float)) else None

    rows = {
        "runs_per_s_100": ("throughput", "100", "runs_per_s"),
        "runs_per_s_300": ("throughput", "300", "runs_per_s"),
        "server_cpu_ms_per_run_300": ("throughput", "300", "server_cpu_ms_per_run"),
        "worker_cpu_ms_per_run_300": ("throughput", "300", "worker_cpu_ms_per_run"),
        "actions_per_run": ("throughput", "100", "profile", "actions", "total"),
        "history_bytes_per_turn": ("per_turn", "history_bytes_per_turn"),
        "server_cpu_ms_per_turn": ("per_turn", "server_cpu_ms_per_turn"),
        "worker_cpu_ms_per_turn": ("per_turn", "worker_cpu_ms_per_turn"),
    }
    table: dict[str, Any] = {}
    for row, path in rows.items():
        vals = {impl: get(impl, *path) for impl in IMPLS}
        ours = vals["ours"]
        ratio = {
            f"ours_over_{k}": round(ours / v, 3) if ours is not None and v else None
            for k, v in vals.items()
            if k != "ours"
        }
        table[row] = {**vals, **ratio}
    return table


async def scenario_peers(opts: Options) -> dict[str, Any]:
    """Ours, the plugin and a hand-written loop: throughput, server cost, actions per run."""
    levels = [100] if opts.quick else [100, 300]
    long_runs = 3 if opts.quick else 10
    out: dict[str, Any] = {
        "levels": levels,
        "turns_per_run": TURNS,
        "model_latency_s": 1.0,
        "per_turn": {"turns_per_run": LONG_TURNS, "runs": long_runs, "model_latency_s": 0.0},
    }
    only = [x for x in os.environ.get("BENCH_PEERS_IMPLS", "").split(",") if x]
    impls = [
        i for i in IMPLS if not (i == "plugin" and plugin_missing()) and (not only or i in only)
    ]
    if "plugin" not in impls:
        out["plugin"] = {"skipped": plugin_missing()}
    for impl in impls:
        res: dict[str, Any] = {"throughput": {}}
        for n in levels:
            opts.log(f"  peers {impl}: {n} concurrent runs")
            with workdir(f"peers-{impl}-{n}") as d:
                t0 = time.monotonic()
                try:
                    res["throughput"][str(n)] = await _throughput(d, impl, n, opts)
                except Exception as e:  # noqa: BLE001
                    res["throughput"][str(n)] = _err(e)
                res["throughput"][str(n)]["scenario_s"] = round(time.monotonic() - t0, 1)
        opts.log(f"  peers {impl}: {long_runs} runs of {LONG_TURNS} turns, one at a time")
        with workdir(f"peers-{impl}-long") as d:
            try:
                res["per_turn"] = await _per_turn(d, impl, long_runs, opts)
            except Exception as e:  # noqa: BLE001
                res["per_turn"] = _err(e)
        out[impl] = res
    out["table"] = _ratios(out)
    return out
