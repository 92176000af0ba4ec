"""The closing tables of ``python -m bench.run``: the summary of headline figures, the machine.

:func:`summary_table` reads the scenarios' result dicts (``bench-results/bench.json``,
``scenarios``) and puts ours beside the plugin, a row per scenario that ran.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from bench.tables import TUNING_NAMES, _b, _err, _g, _v


def summary_table(s: dict[str, Any]) -> Table:
    """Headline figures, ours beside the plugin."""
    t = Table(
        "scenario",
        "target",
        "ours",
        "plugin",
        title="Summary: ours vs the OpenAI Agents plugin (details in the tables above)",
        show_lines=True,
    )
    if "history" in s:
        t.add_row(
            "1. history",
            "constant per turn; segments < 4 MiB",
            _history(s, "ours"),
            _history(s, "plugin"),
        )
    if "overhead" in s:
        t.add_row(
            "2. per turn, model 0 ms",
            f"bare Temporal:\n{_overhead(s, 'bare')}",
            _overhead(s, "ours"),
            _overhead(s, "plugin"),
        )
    if "throughput" in s:
        t.add_row(
            "3. throughput (5 turns, 1 s model)",
            "",
            _throughput(s, "ours"),
            _throughput(s, "plugin"),
        )
    if "crash" in s:
        t.add_row("4. crash recovery", "< 10 s", _crash(s, "ours"), _crash(s, "plugin"))
    if "tuning" in s:
        t.add_row("5. worker settings", "", _tuning(s), "-")
    if "cpu" in s:
        t.add_row(
            "8. worker CPU per 5-turn run", f"hand-written loop: {_cpu(s, 'hand')}", _cpu(s, "ours"),
            _cpu(s, "plugin"),
        )  # fmt: skip
    if "watch" in s:
        t.add_row("watching a run", "<= 1.25x actions and events,\ndelta p95 <= 250 ms",
                  _watch(s), "-")  # fmt: skip
    return t


def _watch(s: dict[str, Any]) -> str:
    """Scenario ``watch``: the live channel's ratios to the unwatched run and its delta p95."""
    r = s["watch"]
    if _err(r):
        return _err(r) or ""
    for row in r.get("rows", []):
        if row.get("config") == "watched, live channel":
            return (f"{row.get('x_actions')}x actions, {row.get('x_events')}x events,\n"
                    f"p95 {row.get('delta_latency_ms_p95')} ms")  # fmt: skip
    return "-"


def _history(s: dict[str, Any], impl: str) -> str:
    """Scenario 1, ``impl``'s longest run: status, segments, bytes per turn, biggest segment."""
    h = _g(s, "history", impl)
    if not isinstance(h, dict):
        return "-"
    if _err(h):
        return _err(h) or "-"
    n = max((k for k in h if k.isdigit()), key=int, default=None)
    if n is None:
        return "-"
    d = h[n]
    if _err(d):
        return _err(d) or "-"
    st = d.get("workflow_status") or d.get("status")
    return (
        f"{n} turns: {st} at turn {d['turns_done']}; {d['segments']} segment(s), "
        f"{_b(d['bytes_per_turn'])}/turn, biggest segment {_b(d['max_segment_bytes'])}"
    )


def _overhead(s: dict[str, Any], impl: str) -> str:
    """Scenario 2: ``impl``'s time per turn (p50, p95 ms) on each server config."""
    parts = []
    for cname, label in (("dev_config", "shipped"), ("fast_transfer", "fast transfer")):
        p = _g(s, "overhead", "configs", cname, impl, "per_turn_ms")
        if p:
            parts.append(f"{label}: p50 {_v(p['p50'])} / p95 {_v(p['p95'])} ms")
    return "\n".join(parts) or "-"


def _throughput(s: dict[str, Any], impl: str) -> str:
    """Scenario 3: ``impl``'s runs/s and run latency (p50, p95 s) per concurrency level."""
    parts = []
    for n, d in (_g(s, "throughput", impl) or {}).items():
        if isinstance(d, dict) and "runs_per_s" in d:
            lat = d["run_latency_s"]
            parts.append(
                f"{n}: {_v(d['runs_per_s'], digits=2)} runs/s, "
                f"p50 {_v(lat['p50'])} s, p95 {_v(lat['p95'])} s"
            )
    return "\n".join(parts) or "-"


def _crash(s: dict[str, Any], impl: str) -> str:
    """Scenario 4: ``impl``'s recovery seconds."""
    d = _g(s, "crash", impl)
    if not isinstance(d, dict):
        return "-"
    return _err(d) or f"{d['recovery_s']} s"


def _tuning(s: dict[str, Any]) -> str:
    """Scenario 5: our runs/s per worker setting, with the 1 s model and the slow (5 s) one."""
    parts = []
    r = s.get("tuning") or {}
    for tuning, d in (r.get("ours") or {}).items():
        if isinstance(d, dict) and "runs_per_s" in d:
            parts.append(
                f"{r.get('runs')} runs, 1 s model, {TUNING_NAMES.get(tuning, tuning)}: "
                f"{_v(d['runs_per_s'], digits=2)} runs/s"
            )
    for tuning, d in (r.get("slow_model") or {}).items():
        if isinstance(d, dict) and "runs_per_s" in d:
            parts.append(
                f"300 runs, 5 s model, {TUNING_NAMES.get(tuning, tuning)}: "
                f"{_v(d['runs_per_s'], digits=2)} runs/s, "
                f"p50 {_v(d['run_latency_s']['p50'])} s"
            )
    return "\n".join(parts) or "-"


def _cpu(s: dict[str, Any], impl: str) -> str:
    """Scenario 8: ``impl``'s worker CPU ms per run and its ratio to the hand-written loop."""
    d = _g(s, "cpu", impl)
    if not isinstance(d, dict):
        return "-"
    ratio = f" ({_v(d['over_hand'], 'x', 2)} the loop)" if d.get("over_hand") else ""
    return _err(d) or f"{_v(d['worker_cpu_ms_per_run'])} ms{ratio}"


def machine_table(m: dict[str, Any]) -> Table:
    """Machine, versions, date."""
    t = Table(title="Machine", show_header=False)
    t.add_column("k")
    t.add_column("v")
    for k in (
        "date",
        "nproc",
        "cpu",
        "memory_gib",
        "loadavg_at_start",
        "python",
        "temporalio",
        "temporal_cli",
        "openai",
        "temporalio_openai_agents",
        "openai_agents",
    ):
        t.add_row(k, str(m.get(k)))
    return t
