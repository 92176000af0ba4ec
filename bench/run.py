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

from rich.console import Console

from bench.cli import table_cli
from bench.common import Options
from bench.evals import table_evals
from bench.feature_tables import (
    table_code_mode,
    table_encryption,
    table_memory,
    table_memory_e2e,
    table_sandbox,
)
from bench.infra import jsonable
from bench.judge import table_judge
from bench.machine import machine_info
from bench.prompt_cache import table_prompt_cache
from bench.scenarios import SCENARIOS
from bench.summary import machine_table, summary_table
from bench.tables import (
    table_cpu,
    table_crash,
    table_fairness,
    table_history,
    table_overhead,
    table_peers,
    table_rate_limit,
    table_throughput,
    table_tuning,
)

DEFAULT_ORDER = [
    "peers", "history", "overhead", "throughput", "cpu", "crash", "tuning", "fairness", "rate_limit", "evals",
    "judge", "encryption", "memory", "memory_e2e", "sandbox", "code_mode", "cli", "prompt_cache",
]  # fmt: skip
console = Console()

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
    "judge": table_judge,
    "cli": table_cli,
    "prompt_cache": table_prompt_cache,
}


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
                results[name] = await SCENARIOS[name](opts, reuse=results.get("throughput"))
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
    p = _parser()
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
    _print_results(names, report)
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(report), indent=2) + "\n")
    console.print(f"wrote {path}")
    return 1 if _has_error(out["scenarios"]) else 0


def _parser() -> argparse.ArgumentParser:
    """The command line: ``--quick``, ``--only``, ``--extended``, ``--baseline``, ``--out``."""
    p = argparse.ArgumentParser(
        prog="python -m bench.run", description=(__doc__ or "").split("\n")[0]
    )
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
    return p


def _print_results(names: list[str], report: dict[str, Any]) -> None:
    """The machine, each scenario's table (or its error), the summary, the seconds taken."""
    console.rule("[bold]results")
    console.print(machine_table(report["machine"]))
    for name in names:
        r = report["scenarios"].get(name, {})
        if "error" in r:
            console.print(f"[red]{name} failed[/red]: {r['error']}")
            continue
        console.print(TABLES[name](r))
    console.print(summary_table(report["scenarios"]))
    console.print(
        f"total {report['total_seconds']} s; scenario seconds: {report['scenario_seconds']}"
    )


def _has_error(tree: Any) -> bool:
    if isinstance(tree, dict):
        return "error" in tree or any(_has_error(v) for v in tree.values())
    if isinstance(tree, list):
        return any(_has_error(v) for v in tree)
    return False


if __name__ == "__main__":
    sys.exit(main())
