"""Scenarios ``fairness`` and ``rate_limit``: tenants sharing one worker, and a rate-limited model.

Both run ``AgentRun`` on an in-memory dev server started from ``temporal-dev.yml`` (fairness on)
with an in-process worker, against the scripted model (``workers/testing/scripted_model.py``).

* ``fairness``: tenant ``big`` starts ``--big`` runs (500; 100 with ``--quick``), then, once its
  backlog has formed, tenant ``small`` starts 5. Each run is one model step of 1 s; the worker
  has 20 activity slots, so model steps queue on the server. Printed: the small tenant's run
  latency (its start to its result), once with the server's fairness on (``tenant_id`` is the
  fairness key of every task a run schedules) and once with ``matching.enableFairness: false``
  (first in, first out).
* ``rate_limit``: ``--limited`` runs (40; 20 with ``--quick``) of a model limited to 4 requests per
  second, served by two workers on its queue (two ``Worker`` objects on separate SDK runtimes,
  as two processes would be). Printed: the observed request rate at the model server (from its
  request log) against the limit, overall and after the initial burst (Temporal's token bucket
  lets about one second of tokens through at once), and the most requests in any 1 s / 5 s.

Run alone: ``python -m bench.run --only fairness,rate_limit [--quick]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client
from temporalio.runtime import Runtime, TelemetryConfig
from temporalio.worker import Worker

from workers.client import start_run
from workers.config import Settings
from workers.testing.env import start_local_env
from workers.testing.scripted_model import ScriptedModel, text
from workers.worker import build_model_workers, build_worker
from workflows.models import RunRequest

SMALL_RUNS = 5
MODEL_LATENCY = 1.0
ACTIVITY_SLOTS = 20
LIMIT_RPS = 4.0


def _spec(directory: Path, rate_limits: dict[str, float] | None = None) -> Path:
    ws = directory / "ws"
    ws.mkdir(exist_ok=True)
    agent: dict[str, Any] = {
        "model": "limited" if rate_limits else "scripted",
        "workspace": str(ws),
    }
    body: dict[str, Any] = {"agents": {"default": {**agent, "tools": []}}}
    if rate_limits:
        body["rate_limits"] = {m: {"requests_per_second": r} for m, r in rate_limits.items()}
    path = directory / "agents.yml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def _settings(model: ScriptedModel, spec: Path) -> Settings:
    return Settings(
        openai_base_url=model.base_url,
        openai_api_key="bench",
        spec_file=str(spec),
        task_queue=f"bench-{uuid.uuid4().hex[:8]}",
        default_model="scripted",
        payload_store="none",
    )


@contextlib.asynccontextmanager
async def _running(workers: list[Worker]) -> AsyncIterator[None]:
    async with contextlib.AsyncExitStack() as stack:
        for w in workers:
            await stack.enter_async_context(w)
        yield


def _dev_config(directory: Path, fairness: bool) -> Path:
    from workers.local.dev_server import find_dev_config, load_dev_config

    src = find_dev_config()
    cfg = load_dev_config(src).model_dump(mode="json") if src else {}
    dyn = dict(cfg.get("dynamic_config") or {})
    dyn["matching.enableFairness"] = fairness
    cfg["dynamic_config"] = dyn
    path = directory / f"temporal-dev-{'fair' if fairness else 'fifo'}.yml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "p50_s": round(xs[len(xs) // 2], 2),
        "max_s": round(xs[-1], 2),
        "mean_s": round(sum(xs) / len(xs), 2),
    }


async def _timed(handle: Any, started: float) -> float:
    await handle.result()
    return time.monotonic() - started


async def _fairness_once(directory: Path, fairness: bool, big: int) -> dict[str, Any]:
    env = await start_local_env(config_path=_dev_config(directory, fairness))
    try:
        with ScriptedModel(responder=lambda _req: text("ok"), latency=MODEL_LATENCY) as model:
            settings = _settings(model, _spec(directory))
            worker = build_worker(env.client, settings, max_concurrent_activities=ACTIVITY_SLOTS)
            async with _running([worker]):
                t0 = time.monotonic()
                sem = asyncio.Semaphore(50)

                async def start(tenant: str, i: int) -> Any:
                    async with sem:
                        req = RunRequest(input=f"{tenant} {i}", tenant_id=tenant)
                        return await start_run(env.client, req, task_queue=settings.task_queue)

                bigs = await asyncio.gather(*(start("big", i) for i in range(big)))
                await asyncio.sleep(1.0)  # the big tenant's backlog forms on the server
                s0 = time.monotonic()
                smalls = [await start("small", i) for i in range(SMALL_RUNS)]
                small_lat = await asyncio.gather(*(_timed(h, s0) for h in smalls))
                big_lat = await asyncio.gather(*(_timed(h, t0) for h in bigs))
                return {
                    "fairness": fairness,
                    "big_runs": big,
                    "small_runs": SMALL_RUNS,
                    "small_latency": _stats(list(small_lat)),
                    "big_span_s": round(max(big_lat), 2),
                    "model_requests": model.count,
                }
    finally:
        await env.shutdown()


async def scenario_fairness(opts: Any) -> dict[str, Any]:
    """Small tenant's run latency behind a big tenant's backlog, with and without fairness."""
    big = 100 if opts.quick else 500
    out: dict[str, Any] = {
        "setup": f"{big} runs of tenant big, then {SMALL_RUNS} of tenant small; one model step "
        f"of {MODEL_LATENCY} s each; one worker with {ACTIVITY_SLOTS} activity slots",
    }
    with tempfile.TemporaryDirectory() as tmp:
        for fairness in (True, False):
            opts.log(f"fairness={fairness}: {big} + {SMALL_RUNS} runs")
            key = "with_fairness" if fairness else "without_fairness"
            out[key] = await _fairness_once(Path(tmp), fairness, big)
    return out


def max_in_window(times: list[float], window: float) -> int:
    """The most timestamps (seconds) falling in any half-open window ``[t, t + window)``."""
    ts = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(ts):
        j = max(j, i)
        while j < len(ts) and ts[j] < t + window:
            j += 1
        best = max(best, j - i)
    return best


async def second_client(client: Client, identity: str = "second-worker") -> Client:
    """A client on its own SDK runtime: a second worker there behaves as another process's would.

    ``identity`` names its workers in the history (``ActivityTaskStarted.identity``).
    """
    return await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=client.data_converter,
        runtime=Runtime(telemetry=TelemetryConfig()),
        identity=identity,
    )


async def scenario_rate_limit(opts: Any) -> dict[str, Any]:
    """Observed request rate of a rate-limited model served by two workers, against its limit."""
    runs = 20 if opts.quick else 40
    with tempfile.TemporaryDirectory() as tmp:
        env = await start_local_env()
        try:
            with ScriptedModel(responder=lambda _req: text("ok")) as model:
                spec = _spec(Path(tmp), {"limited": LIMIT_RPS})
                settings = _settings(model, spec)
                other = await second_client(env.client)
                workers = [
                    build_worker(env.client, settings),
                    *build_model_workers(env.client, settings),
                    *build_model_workers(other, settings),
                ]
                async with _running(workers):
                    reqs = [RunRequest(input=f"r{i}") for i in range(runs)]
                    # all started at once, so the limit, not the starts, sets the pace
                    handles = await asyncio.gather(
                        *(start_run(env.client, r, task_queue=settings.task_queue) for r in reqs)
                    )
                    await asyncio.gather(*(h.result() for h in handles))
                times = [r.received_at for r in model.requests]
        finally:
            await env.shutdown()
    times.sort()
    span = times[-1] - times[0]
    burst = int(LIMIT_RPS) + 1  # Temporal's bucket holds about one second of tokens (+1 in hand)
    rest = times[burst:]
    steady = (len(rest) - 1) / (rest[-1] - rest[0]) if len(rest) > 1 else None
    return {
        "limit_rps": LIMIT_RPS,
        "workers_on_model_queue": 2,
        "requests": len(times),
        "span_s": round(span, 2),
        "observed_rps": round((len(times) - 1) / span, 2) if span > 0 else None,
        "steady_rps": round(steady, 2) if steady else None,
        "max_in_1s_window": max_in_window(times, 1.0),
        "max_in_5s_window": max_in_window(times, 5.0),
    }
