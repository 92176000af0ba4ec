"""``python -m bench.run [--quick] [--only NAME[,NAME]] [--out bench-results/bench.json]``.

Runs the benchmark scenarios (bench/README.md), prints one table per scenario -- this runtime
("ours") beside the OpenAI Agents SDK's Temporal plugin -- with the machine and the date, and
writes every figure to a JSON file.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.table import Table

from bench.common import Options
from bench.evals import table_evals
from bench.infra import jsonable
from bench.machine import machine_info
from bench.scenarios import SCENARIOS

DEFAULT_ORDER = [
    "peers", "history", "overhead", "throughput", "cpu", "crash", "tuning", "fairness", "rate_limit", "evals",
    "encryption", "memory", "memory_e2e", "sandbox", "code_mode",
]  # fmt: skip
console = Console()


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


def table_encryption(r: dict[str, Any]) -> Table:
    """Payload encryption on vs off, two workers side by side."""
    t = Table(
        "worker", "worker CPU per turn", "wall ms per turn (p50)",
        title=f"Encryption at rest: {r.get('round_count')} rounds of {r.get('runs_per_round')} "
        f"{r.get('turns_per_run')}-turn runs, model latency 0, both workers at once",
    )  # fmt: skip
    e = _err(r.get("error")) if isinstance(r.get("error"), dict) else None
    if e:
        t.add_row("-", e, "")
        return t
    for k in ("plain", "encrypted"):
        d = r.get(k) or {}
        t.add_row(
            k, _v(d.get("worker_cpu_ms_per_turn"), " ms", 2), _v(d.get("ms_per_turn_p50"), " ms")
        )
    ratio = r.get("encrypted_over_plain") or {}
    t.add_row("encrypted / plain", _v(ratio.get("worker_cpu_per_turn"), "x", 3),
              _v(ratio.get("ms_per_turn"), "x", 3))  # fmt: skip
    return t


def table_memory(r: dict[str, Any]) -> Table:
    """Memory: BFCL v4 retrieval hits, search latency, Temporal actions added per turn."""
    t = Table("measure", "value", title="Memory (bench/memory.py)")
    q = r.get("bfcl_v4_memory") or {}
    if "error" in q:
        t.add_row("BFCL v4 memory", str(_err(q["error"]) or q["error"]))
    else:
        t.add_row(
            f"BFCL v4 memory retrieval ({q.get('questions')} questions, {q.get('chunks')} chunks)",
            f"hit@1 {q.get('hit@1')}, hit@5 {q.get('hit@5')}, hit@10 {q.get('hit@10')}",
        )
    for k, v in r.items():
        if k.startswith("latency_") and isinstance(v, dict):
            t.add_row(f"search at {v['items']:,} items", f"p50 {v['search_ms_p50']} ms, p95 "
                      f"{v['search_ms_p95']} ms")  # fmt: skip
    t.add_row("Temporal actions added per turn", str(r.get("extra_temporal_actions_per_turn")))
    lag = r.get("consolidation_lag") or {}
    if "error" in lag:
        t.add_row("consolidation lag after a run ends", str(_err(lag["error"]) or lag["error"]))
    elif lag:
        t.add_row(f"consolidation lag after a run ends ({lag.get('runs')} runs)",
                  f"p50 {lag.get('lag_s_p50')} s, max {lag.get('lag_s_max')} s")  # fmt: skip
    return t


def table_memory_e2e(r: dict[str, Any]) -> Table:
    """Memory end to end: BFCL v4 memory questions the model answers, with memory and without."""
    t = Table("agent", "answered", "share", "tokens / run", "completed",
              title=f"Memory end to end on {r.get('model')}: {r.get('questions')} BFCL v4 memory "
                    f"questions, {r.get('items')} items (bench/memory_e2e.py)")  # fmt: skip
    if "skipped" in r:
        t.add_row("skipped", str(r["skipped"]), "", "", "")
        return t
    for agent in ("with_memory", "without_memory"):
        d = r.get(agent) or {}
        t.add_row(agent.replace("_", " "), f"{d.get('correct')} / {r.get('questions')}",
                  _v(d.get("share"), "", 2), str(d.get("tokens_per_run")),
                  str(d.get("completed")))  # fmt: skip
    return t


def table_sandbox(r: dict[str, Any]) -> Table:
    """Sandbox start-up and the run_python tool's overhead."""
    t = Table("what", "p50", "p95", title=f"Sandbox (bubblewrap), {r.get('runs')} runs each")
    for k, label in (("startup_true", "sandbox start-up (`true`)"),
                     ("python_print", "python3 -c 'print(1)' in the sandbox"),
                     ("run_python_tool", "run_python('print(1)') tool, in-process")):  # fmt: skip
        d = r.get(k) or {}
        t.add_row(label, _v(d.get("p50_ms"), " ms"), _v(d.get("p95_ms"), " ms"))
    return t


def table_code_mode(r: dict[str, Any]) -> Table:
    """Code Mode: the 6-tool-call task with and without it."""
    t = Table("", "model turns", "tool calls", "tokens", "wall s (p50)", "history events",
              title=f"Code Mode: a task of 6 dependent tool calls, {r.get('runs')} runs each")  # fmt: skip
    for key in [k for k in r if "@" in k]:
        label, latency = key.split("@")
        name = f"{label} Code Mode, model {latency} s"
        d = r.get(key) or {}
        if "error" in d:
            t.add_row(name, d["error"], "", "", "", "")
            continue
        t.add_row(name, str(d.get("model_turns")), str(d.get("tool_calls")),
                  str(d.get("tokens")), _v(d.get("wall_s_p50"), " s", 3),
                  str(d.get("history_events")))  # fmt: skip
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


TABLES = {
    "peers": table_peers,
    "fairness": table_fairness,
    "rate_limit": table_rate_limit,
    "history": table_history,
    "history_inline": table_history,
    "overhead": table_overhead,
    "throughput": table_throughput,
    "crash": table_crash,
    "tuning": table_tuning,
    "cpu": table_cpu,
    "encryption": table_encryption,
    "memory": table_memory,
    "memory_e2e": table_memory_e2e,
    "sandbox": table_sandbox,
    "code_mode": table_code_mode,
    "evals": table_evals,
}


def _g(tree: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(tree, dict):
            return None
        tree = tree.get(p)
    return tree


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

    def hist(impl: str) -> str:
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

    if "history" in s:
        t.add_row("1. history", "constant per turn; segments < 4 MiB", hist("ours"), hist("plugin"))

    def ovh(impl: str) -> str:
        parts = []
        for cname, label in (("dev_config", "shipped"), ("fast_transfer", "fast transfer")):
            p = _g(s, "overhead", "configs", cname, impl, "per_turn_ms")
            if p:
                parts.append(f"{label}: p50 {_v(p['p50'])} / p95 {_v(p['p95'])} ms")
        return "\n".join(parts) or "-"

    if "overhead" in s:
        t.add_row(
            "2. per turn, model 0 ms",
            f"bare Temporal:\n{ovh('bare')}",
            ovh("ours"),
            ovh("plugin"),
        )

    def tp(impl: str) -> str:
        parts = []
        for n, d in (_g(s, "throughput", impl) or {}).items():
            if isinstance(d, dict) and "runs_per_s" in d:
                lat = d["run_latency_s"]
                parts.append(
                    f"{n}: {_v(d['runs_per_s'], digits=2)} runs/s, "
                    f"p50 {_v(lat['p50'])} s, p95 {_v(lat['p95'])} s"
                )
        return "\n".join(parts) or "-"

    if "throughput" in s:
        t.add_row("3. throughput (5 turns, 1 s model)", "", tp("ours"), tp("plugin"))

    def cr(impl: str) -> str:
        d = _g(s, "crash", impl)
        if not isinstance(d, dict):
            return "-"
        return _err(d) or f"{d['recovery_s']} s"

    if "crash" in s:
        t.add_row("4. crash recovery", "< 10 s", cr("ours"), cr("plugin"))

    def tn() -> str:
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

    if "tuning" in s:
        t.add_row("5. worker settings", "", tn(), "-")

    def cpu(impl: str) -> str:
        d = _g(s, "cpu", impl)
        if not isinstance(d, dict):
            return "-"
        ratio = f" ({_v(d['over_hand'], 'x', 2)} the loop)" if d.get("over_hand") else ""
        return _err(d) or f"{_v(d['worker_cpu_ms_per_run'])} ms{ratio}"

    if "cpu" in s:
        t.add_row(
            "8. worker CPU per 5-turn run", f"hand-written loop: {cpu('hand')}", cpu("ours"),
            cpu("plugin"),
        )  # fmt: skip
    return t


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


# ------------------------------------------------------------------------------------ main


async def _run(names: list[str], opts: Options) -> dict[str, Any]:
    """Run the scenarios in order; a failing scenario is recorded, the others still run."""
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for name in names:
        console.rule(f"[bold]{name}")
        t0 = time.monotonic()
        try:
            if name == "tuning":
                results[name] = await SCENARIOS[name](opts, reuse=results.get("throughput"))  # type: ignore[call-arg]
            else:
                results[name] = await SCENARIOS[name](opts)
        except Exception as e:  # noqa: BLE001 - one scenario failing must not lose the others
            import traceback

            results[name] = {
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc(),
            }
        timings[name] = round(time.monotonic() - t0, 1)
        console.print(f"{name}: {timings[name]} s")
        gc.collect()
    return {"scenarios": results, "scenario_seconds": timings}


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (1 if a scenario failed)."""
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sizes (about 3 minutes)")
    p.add_argument(
        "--only",
        default=None,
        help=f"comma-separated scenarios: {', '.join(SCENARIOS)} (default: {', '.join(DEFAULT_ORDER)})",
    )
    p.add_argument(
        "--extended", action="store_true", help="tuning: also autoscaling pollers and the plugin"
    )
    p.add_argument(
        "--baseline",
        default=None,
        metavar="DIR",
        help="cpu: also run AgentRun from this checkout (e.g. `git worktree add DIR REV`) beside ours",
    )
    p.add_argument("--out", default="bench-results/bench.json", help="JSON output file")
    args = p.parse_args(argv)
    if args.baseline and not (Path(args.baseline) / "bench" / "worker_proc.py").is_file():
        p.error(
            f"--baseline {args.baseline}: not a checkout of this project (no bench/worker_proc.py)"
        )
    names = (
        DEFAULT_ORDER if not args.only else [n.strip() for n in args.only.split(",") if n.strip()]
    )
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    machine = machine_info()
    console.print(machine_table(machine))
    opts = Options(
        quick=args.quick,
        extended=args.extended,
        log=lambda m: console.print(m, highlight=False),
        baseline=args.baseline,
    )
    t0 = time.monotonic()
    out = asyncio.run(_run(names, opts))
    gc.collect()
    report = {
        "machine": machine,
        "options": {"quick": args.quick, "only": names, "extended": args.extended},
        "total_seconds": round(time.monotonic() - t0, 1),
        **out,
    }
    console.rule("[bold]results")
    console.print(machine_table(machine))
    for name in names:
        r = out["scenarios"].get(name, {})
        if "error" in r:
            console.print(f"[red]{name} failed[/red]: {r['error']}")
            continue
        console.print(TABLES[name](r))
    console.print(summary_table(out["scenarios"]))
    console.print(f"total {report['total_seconds']} s; scenario seconds: {out['scenario_seconds']}")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(report), indent=2) + "\n")
    console.print(f"wrote {path}")
    return 1 if _has_error(out["scenarios"]) else 0


def _has_error(tree: Any) -> bool:
    if isinstance(tree, dict):
        return "error" in tree or any(_has_error(v) for v in tree.values())
    if isinstance(tree, list):
        return any(_has_error(v) for v in tree)
    return False


if __name__ == "__main__":
    sys.exit(main())
