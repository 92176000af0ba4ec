"""Scenario ``sandbox``: what running code in the bubblewrap sandbox costs.

* start-up: ``BubblewrapBackend.run(["true"])`` (the sandbox alone: namespaces, mounts, seccomp,
  cgroups) and ``run(["python3", "-c", "print(1)"])``, 40 runs each, p50/p95 in ms;
* the ``run_python("print(1)")`` tool end to end in-process (work folder, copy back, JSON).
Goal (issue #22): start-up p50 <= 60 ms on the 2-core machine.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.common import Options


def _pcts(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "p50_ms": round(statistics.median(xs), 1),
        "p95_ms": round(xs[int(len(xs) * 0.95) - 1], 1),
    }


async def scenario_sandbox(opts: Options) -> dict[str, Any]:
    """Sandbox start-up and run_python overhead (p50/p95)."""
    import shutil
    import tempfile
    from pathlib import Path

    from activities.sandbox import BubblewrapBackend, Limits
    from activities.sandbox.bwrap import new_workdir
    from activities.tools.registry import ToolContext
    from activities.tools.sandbox_tools import configure, run_python

    n = 20 if opts.quick else 40
    sb = BubblewrapBackend()
    out: dict[str, Any] = {"runs": n}
    for label, argv in (
        ("startup_true", ["true"]),
        ("python_print", ["python3", "-c", "print(1)"]),
    ):
        times = []
        for _ in range(n):
            work = new_workdir()
            t = time.perf_counter()
            sb.run(argv, work, Limits(timeout_s=10))
            times.append((time.perf_counter() - t) * 1000)
            shutil.rmtree(work, ignore_errors=True)
        out[label] = _pcts(times)
    with tempfile.TemporaryDirectory() as d:
        configure(Path(d) / "sandbox")
        ctx = ToolContext(workspace=Path(d), run_id="bench")
        times = []
        for _ in range(n):
            t = time.perf_counter()
            run_python(ctx, "print(1)")
            times.append((time.perf_counter() - t) * 1000)
        out["run_python_tool"] = _pcts(times)
    return out
