"""``python -m bench.stream_cost``: what the event stream costs a run, watched and unwatched.

Each configuration runs the same agent: ``--turns`` model steps that each stream a reply of
``--chars`` characters at a model-like pace (4 characters a chunk, ``--chunk-delay`` seconds
apart: 0.03 s is ~33 tokens/s, the local 1.5B model on 2 cores), each with one quick tool call.
It runs on an in-memory dev server with an in-process worker. For every configuration it prints the
history of the run (bytes, events, Signal and Update events) per turn, the wall time per turn, and
how many ``text_delta`` items the subscriber got for the last step (its granularity):

* ``unwatched``: nobody subscribes (the default for runs started by scripts and schedules);
* ``watched B s``: a subscriber follows the run, the activity publishes every ``B`` seconds.

Results go to stdout and, with ``--out``, to a JSON file (README "Live runs" quotes them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from workers import client as rc
from workers.config import Settings
from workers.testing.env import start_local_env
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workers.worker import build_worker
from workflows.models import RunRequest


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


async def _one(
    client: Any, settings: Settings, model: ScriptedModel, batch: float | None, turns: int
) -> dict[str, Any]:
    if batch is not None:
        from activities import streaming

        streaming.BATCH_SECONDS = batch
    worker = build_worker(client, settings)
    task = asyncio.ensure_future(worker.run())
    try:
        t0 = time.perf_counter()
        h = await rc.start_run(client, RunRequest(input="bench"), task_queue=settings.task_queue)
        deltas: list[int] = []
        if batch is not None:
            async for ev in rc.follow(client, h.id):
                if ev["type"] == "model_started":
                    deltas.append(0)
                elif ev["type"] == "text_delta":
                    deltas[-1] += 1
        res = await h.result()
        wall = time.perf_counter() - t0
        hist = await h.fetch_history()
    finally:
        await worker.shutdown()
        await task
    events = hist.events
    signals = sum(e.HasField("workflow_execution_signaled_event_attributes") for e in events)
    updates = sum(e.HasField("workflow_execution_update_accepted_event_attributes") for e in events)
    size = sum(e.ByteSize() for e in events)
    return {
        "config": "unwatched" if batch is None else f"watched {batch:g} s",
        "status": res.status,
        "turns": res.turns,
        "history_bytes": size,
        "history_events": len(events),
        "bytes_per_turn": round(size / res.turns),
        "events_per_turn": round(len(events) / res.turns, 1),
        "signals": signals,
        "updates": updates,
        "seconds_per_turn": round(wall / res.turns, 3),
        "deltas_last_step": deltas[-1] if deltas else 0,
    }


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every configuration; returns one row (a dict of figures) per configuration."""
    env = await start_local_env()
    out: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ws = Path(tmp) / "ws"
            ws.mkdir()
            (ws / "a.txt").write_text("a\n")
            spec = _spec(Path(tmp), ws)
            for batch in [None, *args.batches]:
                model = ScriptedModel(_script(args.turns, args.chars, args.chunk_delay))
                with model:
                    settings = Settings(
                        openai_base_url=model.base_url,
                        openai_api_key="bench",
                        spec_file=str(spec),
                        task_queue=f"bench-{uuid.uuid4().hex[:8]}",
                        default_model="scripted",
                    )
                    row = await _one(env.client, settings, model, batch, args.turns)
                out.append(row)
                print(json.dumps(row), flush=True)
    finally:
        await env.shutdown()
    return out


def main() -> None:
    """Entry point (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m bench.stream_cost")
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--chars", type=int, default=400)
    p.add_argument("--chunk-delay", type=float, default=0.03)
    p.add_argument("--batches", type=float, nargs="*", default=[0.1, 0.25, 0.5, 1.0])
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    rows = asyncio.run(main_async(args))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
