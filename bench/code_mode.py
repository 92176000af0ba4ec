"""Scenario ``code_mode``: one task that needs 6 tool calls, with and without Code Mode.

The same scripted model answers both agents (issue #22): without Code Mode it asks for the six
calls one per turn (read three files, then three calculator steps, each needing the one before),
then answers; with Code Mode it writes one script that gathers the reads and awaits the three
calculations, then answers. Both run on one in-memory dev server with a worker in this process,
3 (``--quick``) or 5 times each, with the model answering at once and after 0.5 s. Printed per
variant: model turns, tokens (prompt + completion, the run's usage), wall seconds per run (p50),
history events per run.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import Options
from bench.infra import write_bench_spec
from workers import client as rc
from workers.config import Settings
from workers.testing.env import start_local_env
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workers.worker import build_worker
from workflows.models import RunRequest

TOOLS = ["read_file", "calculator"]
LATENCIES = (0.0, 0.5)
"""Seconds the scripted model takes per answer: none, and a fast hosted model's."""
SCRIPT = """
import asyncio
a, b, c = await asyncio.gather(
    read_file(path="a.txt"), read_file(path="b.txt"), read_file(path="c.txt")
)
n = await calculator(expression=f"{len(a)}+{len(b)}")
m = await calculator(expression=f"{n}+{len(c)}")
await calculator(expression=f"{m}*2")
"""


def _replies(code_mode: bool, latency: float) -> list[Any]:
    return [r.with_delay(latency) for r in _script(code_mode)]


def _script(code_mode: bool) -> list[Any]:
    if code_mode:
        return [tool_call("run_code", {"script": SCRIPT}), text("The doubled total is 84.")]
    return [
        tool_call("read_file", {"path": "a.txt"}),
        tool_call("read_file", {"path": "b.txt"}),
        tool_call("read_file", {"path": "c.txt"}),
        tool_call("calculator", {"expression": "10+12"}),
        tool_call("calculator", {"expression": "22+20"}),
        tool_call("calculator", {"expression": "42*2"}),
        text("The doubled total is 84."),
    ]


async def _variant(
    client: Any, spec: Path, d: Path, code_mode: bool, runs: int, latency: float
) -> dict[str, Any]:
    walls, turns, tokens, events = [], [], [], []
    for _ in range(runs):
        with ScriptedModel(_replies(code_mode, latency)) as model:
            settings = Settings(
                openai_base_url=model.base_url,
                openai_api_key="bench",
                spec_file=str(spec),
                task_queue=f"bench-code-{uuid.uuid4().hex[:8]}",
                default_model="scripted",
                state_dir=str(d / "state"),
            )
            async with build_worker(client, settings):
                t0 = time.perf_counter()
                h = await rc.start_run(
                    client,
                    RunRequest(agent="code" if code_mode else "plain", input="total, doubled"),
                    task_queue=settings.task_queue,
                )
                res = await h.result()
                walls.append(time.perf_counter() - t0)
                hist = await h.fetch_history()
        if res.status != "completed":
            return {"error": f"run ended {res.status}: {res.stopped_reason}"}
        turns.append(res.turns)
        tokens.append(res.usage.total_tokens)
        events.append(len(hist.events))
    return {
        "model_turns": statistics.median(turns),
        "tool_calls": 6,
        "tokens": statistics.median(tokens),
        "wall_s_p50": round(statistics.median(walls), 3),
        "history_events": statistics.median(events),
    }


async def scenario_code_mode(opts: Options) -> dict[str, Any]:
    """The 6-call task with and without Code Mode (see the module docstring)."""
    runs = 3 if opts.quick else 5
    env = await start_local_env()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            d = Path(tmp)
            plain = {"tools": TOOLS}
            spec = write_bench_spec(d, {"plain": plain, "code": {**plain, "code_mode": plain}})
            for name, size in (("a.txt", 10), ("b.txt", 12), ("c.txt", 20)):
                (d / "ws" / name).write_text("x" * size)
            out: dict[str, Any] = {"runs": runs, "latencies": list(LATENCIES)}
            for latency in LATENCIES:
                for label, flag in (("without", False), ("with", True)):
                    key = f"{label}@{latency:g}"
                    out[key] = await _variant(env.client, spec, d, flag, runs, latency)
                    opts.log(f"code_mode {key}: {out[key]}")
            return out
    finally:
        await env.shutdown()
