"""Scenario ``bfcl_gap``: BFCL accuracy straight from the model server and through the runtime.

``python -m bench.run --only bfcl_gap [--quick|--extended]``. The same cases of BFCL v4
``simple_python``, ``multiple`` (``evals/bfcl/cases.jsonl``) and ``live_multiple``
(``evals/bfcl/live_multiple.jsonl``) -- 5 of each, 3 with ``--quick``, all 15 with
``--extended`` -- go two ways to the model server at ``OPENAI_BASE_URL`` (the local one by
default):

* **raw** (:mod:`bench.bfcl_raw`): one chat-completions request per case, no runtime; the reply's
  first tool call is scored.
* **runtime**: an ``EvalSuite`` of ``AgentRun`` children with agent ``bfcl`` (as ``agentctl eval
  run`` runs them), scored on ``RunResult.tool_calls``, the arguments as the model sent them.

Both use the same scorer (the dataset's ``ScorerConfig``) and the same request (the agent's
prompt, BFCL's own tools in the case's order, temperature 0). Prints per category the cases, raw
passes, runtime passes and the gap (runtime - raw; the goal: never below 0), then each case the
two paths judged differently, with why. Without a reachable model server it measures nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

from rich.console import Console
from rich.table import Table
from temporalio.client import Client

from activities.evals.contracts import Case, RunRecord, ScorerConfig, SuiteProgress, SuiteRequest
from activities.evals.contracts import Variant as EvalVariant
from activities.evals.dataset import load_dataset
from bench.bfcl_raw import RawResult, run_raw
from bench.evals import model_reachable, pick
from bench.infra import ROOT, dev_server, workdir
from workers.config import Settings, load_settings
from workers.eval_client import start_suite
from workers.worker import build_workers

DATASETS = [
    ROOT / "evals" / "bfcl" / "cases.jsonl",
    ROOT / "evals" / "bfcl" / "live_multiple.jsonl",
]
SPEC = ROOT / "evals" / "bfcl" / "agents.yml"
AGENT = "bfcl"
console = Console()


def load_cases(per_category: int | None) -> tuple[list[Case], ScorerConfig]:
    """The first ``per_category`` cases of each category over :data:`DATASETS` (None: all)."""
    cases: list[Case] = []
    scorers = ScorerConfig()
    for path in DATASETS:
        ds = load_dataset(path)
        cases += pick(ds.cases, per_category)
        scorers = ds.scorers  # the files share one scorer configuration
    return cases, scorers


def _why(scores: Any) -> str:
    return next((s.detail for s in scores if s.passed is False and s.detail), "")


def gap_rows(
    cases: list[Case], raw: list[RawResult], runtime: list[RunRecord]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(per category, per differing case)``.

    Per category (in the cases' order, then ``all``): ``{category, cases, raw, runtime, gap}``,
    passes counted, ``gap`` = runtime - raw. Per case judged differently by the two paths:
    ``{case, category, raw, runtime, raw_why, runtime_why, raw_call, raw_calls_in_reply,
    runtime_calls}``.
    """
    by_raw = {r.case_id: r for r in raw}
    by_run = {r.case_id: r for r in runtime}
    cats: dict[str, dict[str, Any]] = {}
    differ: list[dict[str, Any]] = []
    for c in cases:
        cat = str(c.metadata.get("category", ""))
        row = cats.setdefault(cat, {"category": cat, "cases": 0, "raw": 0, "runtime": 0})
        r, rec = by_raw.get(c.id), by_run.get(c.id)
        raw_ok, run_ok = bool(r and r.passed), bool(rec and rec.passed)
        row["cases"] += 1
        row["raw"] += raw_ok
        row["runtime"] += run_ok
        if raw_ok != run_ok:
            differ.append(
                {
                    "case": c.id,
                    "category": cat,
                    "raw": raw_ok,
                    "runtime": run_ok,
                    "raw_why": (r.error or _why(r.scores)) if r else "not run",
                    "runtime_why": (rec.error or _why(rec.scores) or rec.status)
                    if rec
                    else "not run",
                    "raw_call": r.call if r else None,
                    "raw_calls_in_reply": r.calls if r else 0,
                    "runtime_calls": [
                        {k: x.get(k) for k in ("name", "arguments", "status")}
                        for x in (rec.tool_calls if rec else [])
                    ],
                }
            )
    rows = list(cats.values())
    total = {"category": "all", **{k: sum(x[k] for x in rows) for k in ("cases", "raw", "runtime")}}
    for row in [*rows, total]:
        row["gap"] = row["runtime"] - row["raw"]
    return [*rows, total], differ


async def through_runtime(
    client: Client, settings: Settings, cases: list[Case], scorers: ScorerConfig
) -> tuple[SuiteProgress, float]:
    """Run ``cases`` as an ``EvalSuite`` of agent :data:`AGENT` on workers from ``settings``.

    Returns the suite's records and its wall time (s).
    """
    workers = build_workers(client, settings)
    async with contextlib.AsyncExitStack() as stack:
        for w in workers:
            await stack.enter_async_context(w)
        req = SuiteRequest(
            dataset="bfcl-gap",
            cases=cases,
            variants=[EvalVariant(name=AGENT, agent=AGENT)],
            scorers=scorers,
            max_concurrency=4,
        )
        t0 = time.monotonic()
        handle = await start_suite(client, req, task_queue=settings.task_queue)
        prog = SuiteProgress.model_validate(await asyncio.wait_for(handle.result(), 3600))
        return prog, time.monotonic() - t0


async def compare(
    client: Client, settings: Settings, cases: list[Case], scorers: ScorerConfig
) -> dict[str, Any]:
    """Both paths over ``cases`` on ``settings.openai_base_url``; the figures as JSON-able data.

    ``rows`` and ``differ`` are :func:`gap_rows`'; ``per_case`` each case's two verdicts and
    why each failed.

    The raw path runs first, then the suite, so the two never share the server's slots.
    """
    t0 = time.monotonic()
    raw = await run_raw(
        cases,
        settings.openai_base_url,
        settings.openai_api_key,
        settings.default_model,
        AGENT,
        scorers,
        agents_file=SPEC,
    )
    raw_s = time.monotonic() - t0
    prog, run_s = await through_runtime(client, settings, cases, scorers)
    rows, differ = gap_rows(cases, raw, prog.records)
    by_run = {r.case_id: r for r in prog.records}
    per_case = [
        {
            "case": r.case_id,
            "raw": r.passed,
            "runtime": r.case_id in by_run and by_run[r.case_id].passed,
            "raw_why": r.error or _why(r.scores),
            "runtime_why": _why(by_run[r.case_id].scores) if r.case_id in by_run else "not run",
        }
        for r in raw
    ]
    return {
        "model": settings.default_model,
        "cases": len(cases),
        "rows": rows,
        "differ": differ,
        "per_case": per_case,
        "raw_s": round(raw_s, 1),
        "runtime_s": round(run_s, 1),
    }


async def scenario_bfcl_gap(opts: Any) -> dict[str, Any]:
    """Measure on the configured model server; returns :func:`compare`'s figures."""
    base = load_settings()
    model = model_reachable(base.openai_base_url)
    if model is None:
        msg = f"no model server at {base.openai_base_url}: start one (agentctl model-server --background)"
        console.print(f"[yellow]bfcl_gap skipped:[/] {msg}")
        return {"skipped": msg}
    cases, scorers = load_cases(None if opts.extended else (3 if opts.quick else 5))
    with workdir("bfcl_gap") as d:
        async with dev_server(d) as srv:
            settings = Settings(
                openai_base_url=base.openai_base_url,
                openai_api_key=base.openai_api_key,
                spec_file=str(SPEC),
                task_queue=f"bench-bfcl-gap-{uuid.uuid4().hex[:6]}",
                default_model=model,
                state_dir=str(d),
            )
            out = await compare(srv.client, settings, cases, scorers)
    for c in out["per_case"]:
        if not (c["raw"] and c["runtime"]):
            console.print(
                f"{c['case']}: raw {'pass' if c['raw'] else 'fail: ' + c['raw_why']}; "
                f"runtime {'pass' if c['runtime'] else 'fail: ' + c['runtime_why']}",
                highlight=False,
            )
    for d in out["differ"]:
        console.print(
            f"{d['case']}: raw {'pass' if d['raw'] else 'fail'} ({d['raw_why'] or '-'}; "
            f"{d['raw_call']}), runtime {'pass' if d['runtime'] else 'fail'} "
            f"({d['runtime_why'] or '-'}; {d['runtime_calls']})",
            highlight=False,
        )
    return out


def table_bfcl_gap(r: dict[str, Any]) -> Table:
    """The table ``make bench`` prints: category, cases, raw pass, runtime pass, gap."""
    t = Table(
        "category",
        "cases",
        "raw pass",
        "runtime pass",
        "gap",
        title="bfcl_gap: BFCL straight to the model vs through AgentRun",
    )
    if "skipped" in r:
        t.add_row("skipped", r["skipped"], "", "", "")
        return t
    for row in r["rows"]:
        n = row["cases"] or 1
        t.add_row(
            row["category"],
            str(row["cases"]),
            f"{row['raw']} ({row['raw'] / n:.0%})",
            f"{row['runtime']} ({row['runtime'] / n:.0%})",
            f"{row['gap']:+d}",
        )
    return t
