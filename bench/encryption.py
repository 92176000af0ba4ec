"""Scenario ``encryption``: what payload encryption (workers/payloads/encryption.py) costs a run.

Two ``AgentRun`` workers run **at the same time** on one dev server, as in scenario ``cpu``: one
plain, one with ``AGENT_ENCRYPTION_KEYS`` set (AES-256-GCM on every payload, its client encrypting
the start input too). 5-turn runs on a zero-latency scripted model are started interleaved, 10 in
flight per worker, in rounds; each worker's CPU seconds (user + system, /proc) over a round divided
by its turns is its worker CPU per turn, and each run's wall time divided by its turns its ms per
turn. The ratios of the two, round by round, are the figures to quote (one workload's absolute
CPU seconds vary by up to a third on this 2-core VM; side-by-side ratios hold within a few %).

Signed decisions cost one Ed25519 verification (about 0.1 ms, RFC 8032 on OpenSSL) per decision,
not per turn: they are not in this loop.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

from bench.common import Options, _err, _settings, _start_ours
from bench.cpu import pin
from bench.infra import (
    WorkerProc,
    converter_choice,
    counting_responder,
    dev_server,
    spawn_worker,
    workdir,
    write_bench_spec,
)
from bench.machine import proc_cpu_seconds
from workers.client import connect
from workers.payloads.encryption import new_key_line
from workers.testing.scripted_model import ScriptedModel

TURNS = 5
CONCURRENCY = 10


async def _round(targets: dict[str, tuple[Any, str]], n: int) -> dict[str, list[float]]:
    """``n`` runs on each target, interleaved; the wall ms per turn of every run, by target."""
    sems = {k: asyncio.Semaphore(CONCURRENCY) for k in targets}
    walls: dict[str, list[float]] = {k: [] for k in targets}

    async def one(impl: str) -> None:
        client, tq = targets[impl]
        async with sems[impl]:
            t0 = time.monotonic()
            h = await _start_ours(client, tq, TURNS)
            await asyncio.wait_for(h.result(), timeout=300)
            walls[impl].append((time.monotonic() - t0) * 1000 / TURNS)

    await asyncio.gather(*(one(k) for _ in range(n) for k in targets))
    return walls


async def _measure(d: Path, runs: int, reps: int, log: Any) -> dict[str, Any]:
    spec = write_bench_spec(d, {"bench": {"limits": {"max_turns": TURNS + 5, "max_seconds": 900}}})
    keys = new_key_line("bench")
    with ScriptedModel(responder=counting_responder(TURNS)) as model:
        plain = _settings(model.base_url, spec, d)
        enc = plain.model_copy(update={"encryption_keys": keys})
        conv, _ = converter_choice(plain)
        async with dev_server(d, data_converter=conv) as srv:
            enc_client = await connect(enc.model_copy(update={"temporal_address": srv.address}))
            workers: dict[str, WorkerProc] = {}
            try:
                for impl in ("plain", "encrypted"):
                    workers[impl] = spawn_worker(
                        "ours",
                        srv.address,
                        f"enc-{impl}",
                        d,
                        model_url=model.base_url,
                        spec_file=spec,
                        name=f"enc-{impl}",
                        payload_dir=d / "payloads",
                        env={"AGENT_ENCRYPTION_KEYS": keys} if impl == "encrypted" else None,
                    )
                for w in workers.values():
                    await w.wait_ready(120)
                pinned = all(pin(w.pid, {1}) for w in workers.values())
                targets = {
                    "plain": (srv.client, "enc-plain"),
                    "encrypted": (enc_client, "enc-encrypted"),
                }
                await _round(targets, 10)  # warm-up
                rounds = []
                for rep in range(reps):
                    c0 = {k: proc_cpu_seconds(w.pid) or 0.0 for k, w in workers.items()}
                    walls = await _round(targets, runs)
                    c1 = {k: proc_cpu_seconds(w.pid) or 0.0 for k, w in workers.items()}
                    cpu = {k: (c1[k] - c0[k]) * 1000 / (runs * TURNS) for k in workers}
                    wall = {k: statistics.median(v) for k, v in walls.items()}
                    rounds.append({"worker_cpu_ms_per_turn": cpu, "ms_per_turn_p50": wall})
                    log(
                        f"    round {rep + 1}: worker CPU/turn plain {cpu['plain']:.2f} ms, "
                        f"encrypted {cpu['encrypted']:.2f} ms; wall/turn p50 plain "
                        f"{wall['plain']:.1f} ms, encrypted {wall['encrypted']:.1f} ms"
                    )
            finally:
                for w in workers.values():
                    w.stop()
                del enc_client
    return {"rounds": rounds, "workers_share_one_core": pinned}


def _summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str, impl: str) -> float:
        return round(statistics.median(r[key][impl] for r in rounds), 2)

    def ratio(key: str) -> float:
        return round(statistics.median(r[key]["encrypted"] / r[key]["plain"] for r in rounds), 3)

    return {
        impl: {
            "worker_cpu_ms_per_turn": med("worker_cpu_ms_per_turn", impl),
            "ms_per_turn_p50": med("ms_per_turn_p50", impl),
        }
        for impl in ("plain", "encrypted")
    } | {
        "encrypted_over_plain": {
            "worker_cpu_per_turn": ratio("worker_cpu_ms_per_turn"),
            "ms_per_turn": ratio("ms_per_turn_p50"),
        }
    }


async def scenario_encryption(opts: Options) -> dict[str, Any]:
    """Worker CPU and wall ms per turn with payload encryption on vs off, side by side."""
    runs = 30 if opts.quick else 100
    reps = 3 if opts.quick else 5
    out: dict[str, Any] = {"turns_per_run": TURNS, "runs_per_round": runs, "round_count": reps}
    opts.log(f"  encryption: plain and encrypted workers side by side, {reps} x {runs} runs")
    with workdir("encryption") as d:
        try:
            m = await _measure(d, runs, reps, opts.log)
        except Exception as e:  # noqa: BLE001
            return {**out, "error": _err(e)}
    return {**out, **m, **_summary(m["rounds"])}
