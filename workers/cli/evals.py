"""``agentctl eval run`` and ``agentctl eval report``: evaluation suites from the command line.

``eval run DATASET --agent A [--agent B] [--model M ...] [--repeat K] [--json]`` starts an
``EvalSuite`` over the dataset (workflows/eval_suite.py), waits for it (``--detach`` prints the
suite id and returns) and prints the report: a table, or with ``--json`` the JSON report of
:func:`activities.evals.report.build_report` and nothing else. ``eval report SUITE_ID`` prints
the report of a suite, finished or not; ``--rescore`` scores the finished runs again from their
stored results (``--dataset FILE`` for new expectations) without calling the agent's model.

``eval capture RUN_ID ... --to FILE`` writes one case per finished run from its history
(:func:`workers.history.capture_run`): input, answer, tool calls with their results;
``eval run --replay-tools`` answers each case's tool calls from them.

Exit status: 0 the suite finished, 1 it did not (or failed), 2 a usage error, 3 no server.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import typer

from workers.cli.base import (
    EXIT_OK,
    EXIT_RUN_NOT_COMPLETED,
    EXIT_USAGE,
    _with_client,
    app,
    err,
    out,
)

if TYPE_CHECKING:  # the commands import what they use: `agentctl status` loads none of this
    from temporalio.client import Client

    from activities.evals.contracts import Variant

AGENT_OPT = typer.Option([], "--agent", "-a", help="agent spec of a variant (repeatable)")
MODEL_OPT = typer.Option([], "--model", "-m", help="model override (repeatable)")
RUN_IDS_ARG = typer.Argument(..., help="finished runs (workflow ids)")
REPLAY_OPT = typer.Option(
    False, "--replay-tools", help="answer tool calls from each case's recording: no tool runs"
)
eval_app = typer.Typer(no_args_is_help=True, help="Evaluations: datasets run as durable suites.")
app.add_typer(eval_app, name="eval")


def variants_of(agents: list[str], models: list[str]) -> list[Variant]:
    """The suite's variants: one per agent, one per model, or agents and models paired.

    Raises:
        ValueError: several agents and several models of different counts, or repeated names.
    """
    from activities.evals.contracts import Variant

    agents = agents or ["default"]
    if len(models) <= 1:
        out_ = [Variant(name=a, agent=a, model=models[0] if models else None) for a in agents]
    elif len(agents) == 1:
        out_ = [Variant(name=f"{agents[0]}@{m}", agent=agents[0], model=m) for m in models]
    elif len(agents) == len(models):
        out_ = [
            Variant(name=f"{a}@{m}", agent=a, model=m) for a, m in zip(agents, models, strict=True)
        ]
    else:
        raise ValueError(
            "give one agent and several models, several agents and one model, or as many of each"
        )
    names = [v.name for v in out_]
    if len(set(names)) != len(names):
        raise ValueError(f"variants repeat: {', '.join(names)}")
    return out_


def print_report(report: dict[str, Any], as_json: bool) -> None:
    """The report as JSON (``--json``) or as tables: variants, the comparison, then per case."""
    from rich.table import Table

    if as_json:
        sys.stdout.write(json.dumps(report) + "\n")
        return
    state = "finished" if report["done"] else "running"
    out.print(
        f"suite {report['suite_id']} ({report['dataset']}): {report['runs']} of {report['total']} runs, {state}",
        highlight=False,
    )
    t = Table(
        "variant",
        "runs",
        "pass@1",
        f"pass^{_k(report)}",
        "tok/run",
        "$/run",
        "p50 ms",
        "p95 ms",
    )
    for name, v in report["variants"].items():
        t.add_row(
            name,
            str(v["runs"]),
            f"{v['pass_at_1']:.3f}",
            f"{v['pass_hat_k']:.3f}",
            f"{v['tokens']:.0f}",
            f"{v['cost_usd']:.6f}",
            f"{v['p50_ms']:.0f}",
            f"{v['p95_ms']:.0f}",
        )
    out.print(t)
    c = report["comparison"]
    if c is not None:
        out.print(
            f"{c['candidate']} vs {c['baseline']} over {c['cases']} cases: pass@1 difference "
            f"{c['difference']:+.3f} ({c['confidence']:.0%} CI {c['ci_low']:+.3f} .. {c['ci_high']:+.3f}, "
            f"bootstrap); McNemar p = {c['mcnemar_p']:.3g} ({c['discordant']['baseline_only']} runs "
            f"only {c['baseline']} passed, {c['discordant']['candidate_only']} only {c['candidate']}); "
            f"Δ tokens/run {c['delta_tokens']:+.0f}, Δ cost/run ${c['delta_cost_usd']:+.6f}, "
            f"Δ p95 {c['delta_p95_ms']:+.0f} ms",
            highlight=False,
        )
    cases = Table("case", *report["variants"])
    ids = sorted({cid for v in report["variants"].values() for cid in v["cases"]})
    for cid in ids:
        cells = []
        for v in report["variants"].values():
            cs = v["cases"].get(cid)
            cells.append(
                "-" if cs is None else f"{cs['passed']}/{cs['runs']} ({','.join(cs['statuses'])})"
            )
        cases.add_row(cid, *cells)
    out.print(cases)
    _print_drift(report)


def _print_drift(report: dict[str, Any]) -> None:
    """Captured cases: where each variant's runs left the recorded trajectory (none: nothing)."""
    from rich.table import Table

    drift = [
        (name, cid, where)
        for name, v in report["variants"].items()
        for cid, cs in v["cases"].items()
        for where in cs.get("left_recording", [])
    ]
    if drift:
        d = Table("variant", "case", "where the run left the recording")
        for row in drift:
            d.add_row(*row)
        out.print(d)


def _k(report: dict[str, Any]) -> int:
    return next(iter(report["variants"].values()), {}).get("k", 1)


@eval_app.command("run")
def run_cmd(
    dataset: str = typer.Argument(..., help="JSONL cases, or a pydantic-evals .yaml/.json file"),
    agent: list[str] = AGENT_OPT,
    model: list[str] = MODEL_OPT,
    repeat: int = typer.Option(
        1, "--repeat", "-k", min=1, max=100, help="runs per case and variant"
    ),
    concurrency: int = typer.Option(4, "--concurrency", min=1, max=500, help="runs at once"),
    max_turns: int | None = typer.Option(
        None, "--max-turns", min=1, help="override of each run's max_turns"
    ),
    suite_id: str | None = typer.Option(
        None, "--suite-id", help="workflow id (default eval-<uuid4>)"
    ),
    detach: bool = typer.Option(False, "--detach", help="print the suite id and return"),
    as_json: bool = typer.Option(False, "--json", help="print the JSON report only"),
    replay_tools: bool = REPLAY_OPT,
) -> None:
    """Run a dataset against one or more variants as a durable suite and print the report."""
    from activities.evals.contracts import SuiteProgress, SuiteRequest
    from activities.evals.dataset import DatasetError, load_dataset
    from activities.evals.report import build_report
    from workers import eval_client

    try:
        ds = load_dataset(dataset)
        req = SuiteRequest(
            dataset=ds.name,
            cases=ds.cases,
            variants=variants_of(agent, model),
            repeat=repeat,
            approver=ds.approver,
            scorers=ds.scorers,
            max_concurrency=concurrency,
            max_turns=max_turns,
            replay_tools=replay_tools,
        )
    except (DatasetError, ValueError) as e:
        err.print(f"error: {e}", markup=False, highlight=False)
        raise typer.Exit(EXIT_USAGE) from None

    async def go(client: Client) -> int:
        try:
            handle = await eval_client.start_suite(client, req, suite_id=suite_id)
        except eval_client.SuiteTooLargeError as e:
            err.print(f"error: {e}", markup=False, highlight=False)
            return EXIT_USAGE
        if detach:
            sys.stdout.write(handle.id + "\n")
            return EXIT_OK
        if not as_json:
            err.print(
                f"suite {handle.id}: {len(ds.cases)} cases x {len(req.variants)} variants x {repeat}",
                highlight=False,
            )
        prog = SuiteProgress.model_validate(await handle.result())
        print_report(build_report(prog), as_json)
        return EXIT_OK

    raise typer.Exit(_with_client(go))


@eval_app.command("report")
def report_cmd(
    suite_id: str = typer.Argument(..., help="the suite's workflow id (eval-...)"),
    rescore: bool = typer.Option(
        False, "--rescore", help="score the finished runs again (no model calls)"
    ),
    dataset: str | None = typer.Option(
        None, "--dataset", help="with --rescore: cases and scorers from this file"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the JSON report only"),
) -> None:
    """Print a suite's report (per variant, the paired comparison, per case)."""
    from activities.evals.activity import EvalActivities
    from activities.evals.contracts import SuiteRequest
    from activities.evals.dataset import DatasetError, load_dataset
    from activities.evals.report import build_report
    from workers import eval_client
    from workers.config import load_settings

    ds = None
    if dataset is not None:
        try:
            ds = load_dataset(dataset)
        except DatasetError as e:
            err.print(f"error: {e}", markup=False, highlight=False)
            raise typer.Exit(EXIT_USAGE) from None

    async def go(client: Client) -> int:
        prog = await eval_client.progress(client, suite_id)
        if rescore:
            req = SuiteRequest.model_validate(
                await client.get_workflow_handle(suite_id).query("request")
            )
            cases, scorers = (ds.cases, ds.scorers) if ds is not None else (req.cases, req.scorers)
            s = load_settings()
            prog = await eval_client.rescore(
                client, prog, cases, scorers, EvalActivities(s.openai_base_url, s.openai_api_key)
            )
        print_report(build_report(prog), as_json)
        return EXIT_OK if prog.done else EXIT_RUN_NOT_COMPLETED

    raise typer.Exit(_with_client(go))


@eval_app.command("capture")
def capture_cmd(
    run_ids: list[str] = RUN_IDS_ARG,
    to: str = typer.Option(..., "--to", help="JSONL file the cases are written to (replaced)"),
    answer: str = typer.Option(
        "expected",
        "--answer",
        help="the run's answer as the case's `expected` (expected), as the judge's reference "
        "(reference: metadata.reference) or not at all (none)",
    ),
    allow_live: bool = typer.Option(
        False,
        "--allow-live",
        help="a replay runs calls the recording does not answer live (default: a tool error)",
    ),
) -> None:
    """Write one evaluation case per finished run, with its recorded tool calls and results."""
    from pathlib import Path

    from workers import history as ih

    if answer not in ("expected", "reference", "none"):
        err.print("error: --answer is expected, reference or none")
        raise typer.Exit(EXIT_USAGE)

    async def go(client: Client) -> int:
        lines: list[str] = []
        for rid in run_ids:
            try:
                case = await ih.capture_run(
                    client,
                    rid,
                    answer=answer,  # checked above
                    unmatched="live" if allow_live else "error",
                )
            except ih.CaptureError as e:
                err.print(f"error: {e}", markup=False, highlight=False)
                return EXIT_USAGE
            lines.append(case.model_dump_json(exclude_none=True))
            calls = case.recording.calls if case.recording else []
            answered = sum(c.answered for c in calls)
            err.print(f"{rid}: {len(calls)} tool call(s), {answered} with results", highlight=False)
        Path(to).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        err.print(f"wrote {len(lines)} case(s) to {to}", highlight=False)
        return EXIT_OK

    raise typer.Exit(_with_client(go))
