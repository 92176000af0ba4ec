"""``python -m bench.stream_cost``: what watching a run costs, and how late its text arrives.

Each configuration runs the same agent: ``--turns`` model steps that each stream a reply of
``--chars`` characters at a model-like pace (4 characters a chunk, ``--chunk-delay`` seconds
apart: 0.03 s is ~33 tokens/s, the local 1.5B model on 2 cores), each with one quick tool call.
It runs on an in-memory dev server with an in-process worker. For every configuration it prints,
per turn, the run's history (bytes, events) and its Temporal Cloud actions (from the history,
:func:`workers.history.billable_actions`, plus the queries the watcher and the worker sent,
counted by a client interceptor: queries are actions that leave no event), the ratios to the
unwatched run, and the delay from the model server writing a text chunk to the watcher
receiving it (p50/p95 over every chunk of every streamed step):

* ``unwatched``: nobody watches (the worker serves its live channel, as by default);
* ``watched, live channel``: a watcher reads :func:`workers.live_reader.run_events` (the
  worker's live channel, ``AGENT_LIVE_ADDRESS``): deltas outside the history;
* ``..., reconnecting``: the same, but the watcher's connection drops in the middle of every
  reply and it resumes 0.2 s later from its last offset (and characters);
* ``watched, stream polls B s`` (``--batches``): the worker serves no live channel
  (``AGENT_LIVE_ADDRESS=off``), the watcher reads :func:`workers.client.follow`: each poll an
  Update, each batch of deltas (every ``B`` s) a Signal (before issue #38, the only way).

Heartbeats (actions without an event) are the same watched or not and are not counted. Results go
to stdout and, with ``--out``, to a JSON file (docs/live-runs.md quotes them); ``make bench``
runs it as scenario ``watch`` (:func:`scenario_watch`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client, Interceptor, OutboundInterceptor, QueryWorkflowInput

from workers import client as rc
from workers.config import Settings
from workers.history import billable_actions
from workers.testing.env import start_local_env
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workers.worker import build_workers
from workflows.models import RunRequest

SECRET = b"bench-live-secret"


class _CountQueries(Interceptor):
    """Counts the queries sent through a client (the watcher's and the worker's)."""

    def __init__(self) -> None:
        self.queries = 0

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        outer = self

        class _Out(OutboundInterceptor):
            async def query_workflow(self, input: QueryWorkflowInput) -> Any:
                outer.queries += 1
                return await super().query_workflow(input)

        return _Out(next)


def _spec(directory: Path, workspace: Path) -> Path:
    body = {
        "agents": {
            "default": {
                "model": "scripted",
                "system_prompt": "You are a bench agent.",
                "tools": ["list_files"],
                "workspace": str(workspace),
            }
        }
    }
    path = directory / "agents.yml"
    path.write_text(yaml.safe_dump(body))
    return path


def _script(turns: int, chars: int, chunk_delay: float) -> list[Any]:
    body = ("The quick brown fox jumps over the lazy dog. " * (chars // 45 + 1))[:chars]
    steps = [
        tool_call("list_files", {"path": "." + "/." * i}, content=f"{i}: {body}").with_chunk_delay(
            chunk_delay
        )
        for i in range(turns - 1)
    ]
    return [*steps, text(f"end: {body}").with_chunk_delay(chunk_delay)]


def _latencies(model: ScriptedModel, got: list[tuple[float, int, int, str]]) -> list[float]:
    """Seconds from each text chunk written by the model to the watcher holding all of it.

    ``got``: ``(monotonic time, turn, characters of the step's text held after it, text)`` of
    every ``text_delta`` the watcher received (after a ``model_retry`` the count restarts).
    """
    sent: dict[int, list[tuple[float, str]]] = {}
    for n, t, piece in model.chunk_log.entries():
        sent.setdefault(n, []).append((t, piece))
    held: dict[int, list[tuple[float, int]]] = {}
    text_of: dict[int, str] = {}
    for t, turn, chars, piece in got:
        held.setdefault(turn, []).append((t, chars))
        text_of[turn] = text_of.get(turn, "") + piece
    by_text = {v: k for k, v in text_of.items()}
    out: list[float] = []
    for chunks in sent.values():
        turn = by_text.get("".join(p for _, p in chunks))
        if turn is None:
            continue  # a step nobody watched as it was written
        end = 0
        for t_sent, piece in chunks:
            end += len(piece)
            t_got = next((t for t, c in held[turn] if c >= end), None)
            if t_got is not None:
                out.append(max(0.0, t_got - t_sent))
    return out


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    if len(xs) == 1:
        return round(xs[0] * 1000, 1)
    return round(statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1] * 1000, 1)


async def _watch(
    client: Client, run_id: str, mode: str, got: list[tuple[float, int, int, str]]
) -> dict[str, Any]:
    """Read the run to its end as a watcher does; ``got`` receives every text delta."""
    from workers.live_reader import ReaderStats, run_events

    stats = ReaderStats()
    chars: dict[int, int] = {}
    offset, skip, started, drops = 0, 0, 0, 0
    while True:
        events = (
            rc.follow(client, run_id)
            if mode == "polls"
            else run_events(client, run_id, offset, secret=SECRET, stats=stats, skip_chars=skip)
        )
        dropped = False
        async for ev in events:
            offset, skip = ev["offset"] + 1, int(ev.get("chars") or 0)
            if ev["type"] == "model_retry":
                chars[ev["turn"]] = 0
            elif ev["type"] == "text_delta" and ev.get("delta"):
                turn = int(ev["turn"])
                chars[turn] = chars.get(turn, 0) + len(ev["delta"])
                got.append((time.monotonic(), turn, chars[turn], ev["delta"]))
                if mode == "reconnect" and drops < started and chars[turn] > 100:
                    dropped = True  # the watcher's connection drops mid-reply, once a step
                    break
            elif ev["type"] == "model_started":
                started += 1
        await events.aclose()
        if not dropped:
            break
        drops += 1
        await asyncio.sleep(0.2)
    return {"reader_queries": stats.queries, "fallback": stats.fallback, "reconnects": drops}


async def _one(
    base: Client,
    settings: Settings,
    model: ScriptedModel,
    mode: str,
    batch: float | None,
) -> dict[str, Any]:
    from activities import streaming
    from workers.live_server import LiveServer

    counter = _CountQueries()
    client = Client(**{**base.config(), "interceptors": [counter]})
    if batch is not None:
        streaming.BATCH_SECONDS = batch
    live = None if mode == "polls" else LiveServer("127.0.0.1:0", SECRET)
    url = await live.start() if live is not None else None
    workers = build_workers(client, settings, live_url=url)
    tasks = [asyncio.ensure_future(w.run()) for w in workers]
    got: list[tuple[float, int, int, str]] = []
    reader: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        h = await rc.start_run(client, RunRequest(input="bench"), task_queue=settings.task_queue)
        if mode != "unwatched":
            reader = await _watch(client, h.id, mode, got)
        res = await h.result()
        wall = time.perf_counter() - t0
        hist = await h.fetch_history()
    finally:
        for w in workers:
            await w.shutdown()
        for t in tasks:
            await t
        if live is not None:
            await live.stop()
        streaming.BATCH_SECONDS = 0.25
    return (
        _row(mode, batch, res, wall, list(hist.events), counter.queries, _latencies(model, got))
        | reader
    )


def _row(
    mode: str,
    batch: float | None,
    res: Any,
    wall: float,
    events: list[Any],
    queries: int,
    lat: list[float],
) -> dict[str, Any]:
    """One configuration's figures (see the module docstring)."""
    actions = billable_actions(events)
    names = {
        "unwatched": "unwatched",
        "live": "watched, live channel",
        "reconnect": "watched, live channel, reconnecting mid-reply every step",
    }
    name = names.get(mode) or f"watched, stream polls {batch or 0:g} s"
    size = sum(e.ByteSize() for e in events)
    total_actions = actions["total"] + queries
    return {
        "config": name,
        "status": res.status,
        "turns": res.turns,
        "history_bytes": size,
        "history_events": len(events),
        "bytes_per_turn": round(size / res.turns),
        "events_per_turn": round(len(events) / res.turns, 1),
        "actions": total_actions,
        "actions_in_history": actions["total"],
        "queries": queries,
        "signals": actions.get("signal", 0),
        "updates": actions.get("update", 0),
        "actions_per_turn": round(total_actions / res.turns, 2),
        "seconds_per_turn": round(wall / res.turns, 3),
        "delta_latency_ms_p50": _pct(lat, 50),
        "delta_latency_ms_p95": _pct(lat, 95),
        "chunks_timed": len(lat),
    }


async def main_async(args: argparse.Namespace, log: Any = print) -> list[dict[str, Any]]:
    """Run every configuration; returns one row (a dict of figures) per configuration.

    Each row's ``x_actions`` and ``x_events`` are its ratios to the unwatched run.
    """
    env = await start_local_env()
    out: list[dict[str, Any]] = []
    configs: list[tuple[str, float | None]] = [
        ("unwatched", None),
        ("live", None),
        ("reconnect", None),
    ]
    configs += [("polls", b) for b in args.batches]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ws = Path(tmp) / "ws"
            ws.mkdir()
            (ws / "a.txt").write_text("a\n")
            spec = _spec(Path(tmp), ws)
            for mode, batch in configs:
                model = ScriptedModel(_script(args.turns, args.chars, args.chunk_delay))
                with model:
                    settings = Settings(
                        openai_base_url=model.base_url,
                        openai_api_key="bench",
                        spec_file=str(spec),
                        task_queue=f"bench-{uuid.uuid4().hex[:8]}",
                        default_model="scripted",
                        state_dir=tmp,
                    )
                    row = await _one(env.client, settings, model, mode, batch)
                if out:
                    row["x_actions"] = round(row["actions"] / out[0]["actions"], 2)
                    row["x_events"] = round(row["history_events"] / out[0]["history_events"], 2)
                out.append(row)
                log(json.dumps(row))
    finally:
        await env.shutdown()
    return out


async def scenario_watch(opts: Any) -> dict[str, Any]:
    """``make bench`` scenario ``watch``: the rows of :func:`main_async` (``--quick``: 3 turns)."""
    args = argparse.Namespace(
        turns=3 if opts.quick else 4, chars=400, chunk_delay=0.03, batches=[0.25]
    )
    rows = await main_async(args, log=opts.log)
    return {"rows": rows, "turns": args.turns, "chars": args.chars}


def main() -> None:
    """Entry point (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m bench.stream_cost")
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--chars", type=int, default=400)
    p.add_argument("--chunk-delay", type=float, default=0.03)
    p.add_argument("--batches", type=float, nargs="*", default=[0.25])
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    rows = asyncio.run(main_async(args))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
