"""Scenario ``evals``: the BFCL subset (evals/bfcl) on the local model through ``EvalSuite``.

``python -m bench.run --only evals``. Two variants (agents ``bfcl`` and ``bfcl-terse``: two
prompts) over an even share of the ``simple_python`` and ``multiple`` cases (5 of each; ``--quick``
2; ``--extended`` all 30), one run per case and variant, 4 at once, on the model server at
``OPENAI_BASE_URL`` (the local one by default: ``agentctl model-server --background``). Prints
per case and variant whether the call was right, tokens and latency; per variant accuracy
(pass@1), tokens per run and p50/p95 latency; and the paired comparison. Without a reachable
model server the scenario says so and measures nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from rich.console import Console
from rich.table import Table

from activities.evals.contracts import Case, SuiteProgress, SuiteRequest, Variant
from activities.evals.dataset import load_dataset
from activities.evals.report import build_report
from bench.infra import ROOT, dev_server, workdir
from workers.config import LOCAL_MODEL_NAME, Settings, load_settings
from workers.eval_client import start_suite
from workers.worker import build_workers

DATASET = ROOT / "evals" / "bfcl" / "cases.jsonl"
SPEC = ROOT / "evals" / "bfcl" / "agents.yml"
VARIANTS = [Variant(name="bfcl", agent="bfcl"), Variant(name="bfcl-terse", agent="bfcl-terse")]
console = Console()


def pick(cases: list[Case], per_category: int | None) -> list[Case]:
    """The first ``per_category`` cases of each category (all with None), in dataset order."""
    if per_category is None:
        return cases
    seen: dict[str, int] = {}
    out = []
    for c in cases:
        cat = str(c.metadata.get("category"))
        if seen.get(cat, 0) < per_category:
            seen[cat] = seen.get(cat, 0) + 1
            out.append(c)
    return out


def model_reachable(base_url: str) -> str | None:
    """The first model the server lists, or None when it cannot be reached."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=3) as r:  # noqa: S310
            data = json.loads(r.read()).get("data") or []
        return str(data[0]["id"]) if data else LOCAL_MODEL_NAME
    except (OSError, urllib.error.URLError, ValueError, KeyError):
        return None


def per_case_table(prog: SuiteProgress) -> Table:
    """One row per run: case, variant, pass, tokens, latency (ms), status and the first call."""
    t = Table("case", "variant", "pass", "tokens", "ms", "status", "call")
    for r in sorted(prog.records, key=lambda r: (r.case_id, r.variant)):
        call = r.tool_calls[0]["name"] if r.tool_calls else "-"
        t.add_row(
            r.case_id,
            r.variant,
            "yes" if r.passed else "no",
            str(r.tokens),
            f"{r.latency_ms:.0f}",
            r.status,
            call,
        )
    return t


async def scenario_evals(opts: Any) -> dict[str, Any]:
    """Run the suite; returns the JSON report plus per-run rows and the wall time."""
    base = load_settings()
    model = model_reachable(base.openai_base_url)
    if model is None:
        msg = f"no model server at {base.openai_base_url}: start one (agentctl model-server --background)"
        console.print(f"[yellow]evals skipped:[/] {msg}")
        return {"skipped": msg}
    per = None if opts.extended else (2 if opts.quick else 5)
    cases = pick(load_dataset(DATASET).cases, per)
    with workdir("evals") as d:
        async with dev_server(d) as srv:
            settings = Settings(
                openai_base_url=base.openai_base_url,
                openai_api_key=base.openai_api_key,
                spec_file=str(SPEC),
                task_queue=f"bench-evals-{uuid.uuid4().hex[:6]}",
                default_model=model,
                state_dir=str(d),
            )
            workers = build_workers(srv.client, settings)
            async with contextlib.AsyncExitStack() as stack:
                for w in workers:
                    await stack.enter_async_context(w)
                req = SuiteRequest(
                    dataset="bfcl-v4-subset", cases=cases, variants=VARIANTS, max_concurrency=4
                )
                t0 = time.monotonic()
                handle = await start_suite(srv.client, req, task_queue=settings.task_queue)
                prog = SuiteProgress.model_validate(await asyncio.wait_for(handle.result(), 3600))
                wall = time.monotonic() - t0
    report = build_report(prog)
    console.print(per_case_table(prog))
    for name, v in report["variants"].items():
        console.print(
            f"{name}: accuracy {v['pass_at_1']:.2f} over {v['runs']} runs; "
            f"{v['tokens']:.0f} tokens/run; latency p50 {v['p50_ms']:.0f} ms, p95 {v['p95_ms']:.0f} ms",
            highlight=False,
        )
    c = report["comparison"]
    console.print(
        f"{c['candidate']} - {c['baseline']}: {c['difference']:+.2f} "
        f"(95% CI {c['ci_low']:+.2f} .. {c['ci_high']:+.2f}), McNemar p {c['mcnemar_p']:.3g}",
        highlight=False,
    )
    rows = [
        r.model_dump(include={"case_id", "variant", "passed", "tokens", "latency_ms", "status"})
        for r in prog.records
    ]
    return {
        "model": model,
        "cases": len(cases),
        "wall_s": round(wall, 1),
        "report": report,
        "runs": rows,
    }


def table_evals(r: dict[str, Any]) -> Table:
    """The results table of ``make bench``: per variant, then per case and variant."""
    t = Table(
        "variant / case", "accuracy", "tokens", "p50 ms", "p95 ms", title="evals: BFCL subset"
    )
    if "skipped" in r:
        t.add_row("skipped", r["skipped"], "", "", "")
        return t
    for name, v in r["report"]["variants"].items():
        t.add_row(
            name,
            f"{v['pass_at_1']:.2f} ({v['runs']} runs)",
            f"{v['tokens']:.0f}/run",
            f"{v['p50_ms']:.0f}",
            f"{v['p95_ms']:.0f}",
        )
    for row in sorted(r["runs"], key=lambda x: (x["case_id"], x["variant"])):
        ms = f"{row['latency_ms']:.0f}"
        t.add_row(
            f"  {row['case_id']} · {row['variant']}",
            "pass" if row["passed"] else "fail",
            str(row["tokens"]),
            ms,
            ms,
        )
    return t
