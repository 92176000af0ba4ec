"""The tables of the numbered benchmark scenarios (0 to 8), and the cell formats all tables share.

Each ``table_<scenario>`` takes that scenario's result dict (as :mod:`bench.scenarios` returns it
and ``bench-results/bench.json`` holds it) and returns a ``rich`` table; an error or a skip shows
in its cell. ``python -m bench.run`` prints them (``bench.run.TABLES``).
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table

# ------------------------------------------------------------------------------------ format


def _b(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    if n >= 1024 * 1024:
        return f"{n / 1024 / 1024:.2f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{int(n)} B"


def _v(x: Any, unit: str = "", digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}{unit}"
    return f"{x}{unit}"


def _err(d: Any) -> str | None:
    if isinstance(d, dict) and "error" in d:
        return f"[red]error[/red]: {d['error'][:120]}"
    if isinstance(d, dict) and "skipped" in d:
        return f"skipped: {d['skipped']}"
    return None


# ------------------------------------------------------------------------------------ tables


def _hist_cell(d: Any, n: int) -> str:
    segs = d["segments"]
    seg_sizes = ", ".join(_b(s["history_bytes"]) for s in d["segments_detail"][:8])
    if segs > 8:
        seg_sizes += ", ..."
    under = "yes" if d["all_segments_under_4mib"] else "[yellow]no[/yellow]"
    status = d.get("workflow_status") or d.get("status")
    first, last = _b(d["turn_bytes_first10"]), _b(d["turn_bytes_last10"])
    turn_ms = ", ".join(f"{s.get('per_turn_ms_p50', 0):.0f}" for s in d["segments_detail"][:8])
    return (
        f"{status}: {d['turns_done']}/{n} turns, {segs} segment(s)\n"
        f"total {_b(d['total_history_bytes'])}, {_b(d['bytes_per_turn'])}/turn\n"
        f"bytes per turn, first/last 10 turns: {first} / {last}\n"
        f"segments: {seg_sizes}\n"
        f"all < 4 MiB: {under}; biggest payload {_b(d['max_payload_bytes'])}\n"
        f"time per turn p50 by segment: {turn_ms} ms; wall {d.get('wall_s')} s"
    )


def table_history(r: dict[str, Any]) -> Table:
    """Scenario 1: one row per run length, one column per implementation."""
    t = Table(
        "turns",
        title="1. History per run (model latency 0; a calculator call every turn)",
        show_lines=True,
    )
    cols = [k for k in ("ours", "ours_inline", "plugin") if k in r]
    for k in cols:
        t.add_column(k)
    for n in r.get("turn_counts", []):
        row = [str(n)]
        for k in cols:
            d = r[k].get(str(n)) if isinstance(r[k], dict) else None
            e = _err(r[k]) or _err(d)
            row.append(e or ("-" if d is None else _hist_cell(d, n)))
        t.add_row(*row)
    return t


def table_overhead(r: dict[str, Any]) -> Table:
    """Scenario 2: per-turn time for bare Temporal, ours and the plugin, two server configs."""
    n = r.get("turns_per_run")
    t = Table(
        "server config",
        title=f"2. Time per turn, model latency 0 ({n}-turn run after a warm-up run)",
        show_lines=True,
    )
    impls = ["bare", "ours", "plugin"]
    for k in impls:
        t.add_column("bare Temporal (2 trivial activities)" if k == "bare" else k)
    for cname, c in (r.get("configs") or {}).items():
        label = "temporal-dev.yml as shipped"
        if cname != "dev_config":
            label = "+ history.transferProcessorMaxPollRPS=1000"
        row = [label]
        for k in impls:
            d = c.get(k)
            e = _err(c) or _err(d)
            if e or d is None:
                row.append(e or "-")
                continue
            p = d["per_turn_ms"]
            row.append(
                f"p50 {_v(p['p50'])} ms, p95 {_v(p['p95'])} ms\n"
                f"CPU per turn: worker {_v(d['worker_cpu_ms_per_turn'])} ms, "
                f"server {_v(d['server_cpu_ms_per_turn'])} ms"
            )
        t.add_row(*row)
    return t


def _tp_cell(d: Any) -> str:
    e = _err(d)
    if e or d is None:
        return e or "-"
    lat = d["run_latency_s"]
    cpu = d.get("cpu", {})
    return (
        f"{_v(d['runs_per_s'], digits=2)} runs/s; run latency p50 {_v(lat['p50'])} s, "
        f"p95 {_v(lat['p95'])} s\n"
        f"completed {d['completed']}/{d['runs']}; "
        f"model calls in flight at most {d['model_server_max_in_flight']}\n"
        f"CPU (% of one core): worker {_v(cpu.get('worker_cpu_pct'))}, "
        f"server {_v(cpu.get('server_cpu_pct'))}, other processes "
        f"{_v(cpu.get('other_processes_cpu_pct'))}"
    )


def table_throughput(r: dict[str, Any]) -> Table:
    """Scenario 3: one row per concurrency level."""
    t = Table(
        "concurrent runs",
        "ours",
        "plugin",
        title="3. Throughput: concurrent 5-turn runs, model latency 1 s, one worker",
        show_lines=True,
    )
    for n in r.get("levels", []):
        ours = r.get("ours", {}).get(str(n))
        plugin = r.get("plugin", {}).get(str(n))
        t.add_row(str(n), _tp_cell(ours), _tp_cell(plugin))
    return t


def _crash_cell(d: Any) -> str:
    e = _err(d)
    if e or d is None:
        return e or "-"
    return (
        f"[bold]{d['recovery_s']} s[/bold] from the new worker's start to the retried model call\n"
        f"kill -> retry {d['kill_to_retry_s']} s (attempt {d['retry_attempt']}); "
        f"new worker ready in {d['worker_startup_s']} s\n"
        f"retried call done -> next workflow task {d['result_to_next_workflow_task_s']} s; "
        f"kill -> run completed {d['kill_to_run_completed_s']} s"
    )


def table_crash(r: dict[str, Any]) -> Table:
    """Scenario 4."""
    t = Table(
        "ours (shipped defaults)",
        "plugin (defaults)",
        title=f"4. Crash recovery: worker SIGKILLed {r.get('kill_after_s')} s into a "
        f"{r.get('model_latency_s')} s model call",
        show_lines=True,
    )
    t.add_row(_crash_cell(r.get("ours")), _crash_cell(r.get("plugin")))
    return t


TUNING_NAMES = {
    "ours": "WorkerTuning (shipped)",
    "sdk": "Temporal SDK defaults",
    "autoscale": "WorkerTuning + autoscaling pollers",
}


def table_tuning(r: dict[str, Any]) -> Table:
    """Scenario 5: worker settings."""
    t = Table(
        "load",
        "worker settings",
        "result",
        title="5. Worker settings (ours unless marked)",
        show_lines=True,
    )
    load = f"{r.get('runs')} runs x 5 turns, model 1 s"
    for impl in ("ours", "plugin"):
        for tuning, d in (r.get(impl) or {}).items():
            name = TUNING_NAMES.get(tuning, tuning)
            t.add_row(load, name if impl == "ours" else f"plugin: {name}", _tp_cell(d))
    slow = r.get("slow_model")
    if slow:
        load = f"{slow['runs']} runs x {slow['turns_per_run']} turns, model {slow['model_latency_s']} s"
        for tuning in ("ours", "sdk"):
            if tuning in slow:
                t.add_row(load, TUNING_NAMES[tuning], _tp_cell(slow[tuning]))
    return t


def table_fairness(r: dict[str, Any]) -> Table:
    """Scenario 6: a small tenant behind a big tenant's backlog."""
    t = Table(title=f"6. Fairness between tenants ({r.get('setup')})")
    for col in ("server", "small tenant p50", "small tenant max", "big tenant span"):
        t.add_column(col)
    for key, name in (("with_fairness", "fairness on"), ("without_fairness", "fairness off")):
        d = r.get(key) or {}
        lat = d.get("small_latency") or {}
        t.add_row(
            name,
            _v(lat.get("p50_s"), " s", 2),
            _v(lat.get("max_s"), " s", 2),
            _v(d.get("big_span_s"), " s", 1),
        )
    return t


def table_cpu(r: dict[str, Any]) -> Table:
    """Scenario 8: worker CPU per run, every worker side by side; ratios to the hand-written loop."""
    t = Table(
        "worker",
        "worker CPU per run (median)",
        "ratio to the hand-written loop",
        "per round (ms)",
        title=f"8. Worker CPU per {r.get('turns_per_run')}-turn run, model latency 0, all workers "
        f"at once, {r.get('round_count')} rounds of {r.get('runs_per_round')} runs each",
        show_lines=True,
    )
    names = {
        "hand": "hand-written loop (bench/handwritten.py)",
        "ours": "ours",
        "baseline": f"baseline ({r.get('baseline_dir')})",
        "plugin": "plugin",
    }
    e = _err(r.get("error")) if isinstance(r.get("error"), dict) else None
    if e:
        t.add_row("-", e, "", "")
        return t
    for k, label in names.items():
        d = r.get(k)
        if not isinstance(d, dict):
            continue
        rounds = ", ".join(str(x["worker_cpu_ms_per_run"].get(k)) for x in r.get("rounds", []))
        t.add_row(label, f"[bold]{_v(d['worker_cpu_ms_per_run'])} ms[/bold]",
                  _v(d.get("over_hand"), "x", 2) if k != "hand" else "1", rounds)  # fmt: skip
    if isinstance(r.get("ours"), dict) and r["ours"].get("over_baseline"):
        t.caption = f"ours / baseline, median of the rounds' ratios: {r['ours']['over_baseline']}"
    return t


def table_peers(r: dict[str, Any]) -> Group:
    """Scenario ``peers``: the whole-run table of issue #23, then where the server's time goes."""
    return Group(_table_peers_main(r), _table_peers_profile(r))


def _table_peers_profile(r: dict[str, Any], level: str = "300") -> Table:
    """Per run, from the sampled histories at ``level`` concurrent runs.

    Events by type, payload bytes by event type, workflow tasks, sticky misses, timeouts, actions
    by kind.
    """
    impls = ("ours", "plugin", "hand")
    prof = {k: _g(r, k, "throughput", level, "profile") or {} for k in impls}
    t = Table(
        "per run", *impls,
        title=f"0b. Where the server's time goes: per run, {level} concurrent runs "
        f"({prof['ours'].get('sampled_runs', '-')} sampled histories each)",
    )  # fmt: skip
    for key in ("event_count", "commands", "workflow_tasks", "sticky_misses",
                "workflow_task_timeouts", "history_bytes"):  # fmt: skip
        t.add_row(key.replace("_", " "), *(_v(prof[k].get(key)) for k in impls))
    for section, label in (("events", "events"), ("payload_bytes", "payload bytes"),
                           ("actions", "actions")):  # fmt: skip
        names = sorted({n for k in impls for n in (prof[k].get(section) or {})})
        for n in names:
            t.add_row(f"{label}: {n}", *(_v((prof[k].get(section) or {}).get(n)) for k in impls))
    return t


def _table_peers_main(r: dict[str, Any]) -> Table:
    t = Table(
        "",
        "ours",
        "plugin",
        "hand-written loop",
        "ours / plugin",
        "ours / loop",
        title=f"0. Peers: {r.get('turns_per_run')}-turn runs (a calculator call per turn), "
        f"model latency {r.get('model_latency_s')} s, one worker, a fresh dev server each",
        show_lines=True,
    )
    labels = {
        "runs_per_s_100": "runs/s, 100 concurrent",
        "runs_per_s_300": "runs/s, 300 concurrent",
        "server_cpu_ms_per_run_300": "Temporal server CPU per run, 300 concurrent (ms)",
        "worker_cpu_ms_per_run_300": "worker CPU per run, 300 concurrent (ms)",
        "actions_per_run": "Temporal Cloud actions per run (from histories)",
        "history_bytes_per_turn": "history bytes per turn (20-turn run, latency 0)",
        "server_cpu_ms_per_turn": "server CPU per turn (20-turn run, latency 0, ms)",
        "worker_cpu_ms_per_turn": "worker CPU per turn (20-turn run, latency 0, ms)",
    }
    for key, label in labels.items():
        row = (r.get("table") or {}).get(key) or {}
        t.add_row(
            label,
            f"[bold]{_v(row.get('ours'))}[/bold]",
            _v(row.get("plugin")),
            _v(row.get("hand")),
            _v(row.get("ours_over_plugin"), "x", 2),
            _v(row.get("ours_over_hand"), "x", 2),
        )
    prof = {k: _g(r, k, "throughput", "100", "profile") or {} for k in ("ours", "plugin", "hand")}
    t.caption = "per run at 100 concurrent (sampled histories): " + "; ".join(
        f"{k}: {p.get('event_count')} events, {p.get('commands')} commands, "
        f"{p.get('workflow_tasks')} workflow tasks, {p.get('sticky_misses')} sticky misses"
        for k, p in prof.items()
        if p
    )
    return t


def table_rate_limit(r: dict[str, Any]) -> Table:
    """Scenario 7: a rate-limited model served by two workers."""
    t = Table(title="7. Model rate limit held across two workers")
    for col in (
        "limit",
        "requests",
        "observed rate",
        "after the burst",
        "most in 1 s",
        "most in 5 s",
    ):
        t.add_column(col)
    t.add_row(
        _v(r.get("limit_rps"), "/s", 1),
        str(r.get("requests")),
        _v(r.get("observed_rps"), "/s", 2),
        _v(r.get("steady_rps"), "/s", 2),
        str(r.get("max_in_1s_window")),
        str(r.get("max_in_5s_window")),
    )
    return t


def _g(tree: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(p)
    return tree
