"""The tables of the feature scenarios: encryption, memory, memory_e2e, sandbox, code_mode.

As in :mod:`bench.tables`: each takes its scenario's result dict and returns a ``rich`` table.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from bench.tables import _err, _v


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


def table_watch(r: dict[str, Any]) -> Table:
    """Watching a run: actions, history and delta latency, watched and unwatched (issue #38)."""
    t = Table("run", "actions", "history events", "history bytes / turn", "x unwatched",
              "delta latency p50 / p95",
              title=f"Watching a run ({r.get('turns')} turns, {r.get('chars')}-character replies "
                    "at ~33 tokens/s; bench/stream_cost.py; target: <= 1.25x, p95 <= 250 ms)")  # fmt: skip
    for row in r.get("rows", []):
        x = "-" if "x_actions" not in row else f"{row['x_actions']}x / {row['x_events']}x"
        p50, p95 = row.get("delta_latency_ms_p50"), row.get("delta_latency_ms_p95")
        lat = "-" if p95 is None else f"{p50} / {p95} ms"
        t.add_row(row["config"], str(row["actions"]), str(row["history_events"]),
                  f"{row['bytes_per_turn']:,}", x, lat)  # fmt: skip
    return t
