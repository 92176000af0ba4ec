"""The report of a suite: pass@1 and pass^k per case and variant, a paired comparison, costs.

Pure functions over :class:`~activities.evals.contracts.RunRecord` lists (the suite's result or
its ``progress`` query). Statistics come from SciPy: the interval of the paired difference is a
bootstrap over cases (``scipy.stats.bootstrap``, percentile method, 95 %, fixed seed so a report
is reproducible), and McNemar's exact test is a binomial test over the discordant
(case, repeat) pairs (``scipy.stats.binomtest``). SciPy is the optional extra ``evals``
(``pip install 'temporal-agent-runtime[evals]'``), imported only when a report compares two variants;
without it that report raises :class:`activities.extras.MissingExtraError` naming the extra.

* pass@1 of a case: the fraction of its runs that passed; of a variant: the mean over cases.
* pass^k (tau-bench's "pass hat k"): the probability that k runs of a case drawn without
  replacement all pass, C(c, k) / C(n, k) with c passes of n runs and k = the suite's repeat;
  of a variant: the mean over cases.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from activities.evals.contracts import RunRecord, SuiteProgress
from activities.extras import require

if TYPE_CHECKING:  # numpy and scipy load when a report is built, not when this module is imported
    from types import ModuleType

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000


def pass_hat_k(c: int, n: int, k: int) -> float:
    """C(c, k) / C(n, k): chance that k of the n runs (c passed), drawn at random, all passed."""
    if n <= 0 or k <= 0:
        return 0.0
    k = min(k, n)
    return math.comb(c, k) / math.comb(n, k)


def _np() -> ModuleType:
    import numpy

    return numpy


def _stats() -> Any:
    """``scipy.stats`` (extra ``evals``).

    Raises:
        activities.extras.MissingExtraError: scipy is not installed (the message names the extra).
    """
    return require("scipy.stats", "evals", "the evaluation report's interval and McNemar test")


def _mean(values: list[float]) -> float:
    return float(_np().mean(values))


def _percentile(values: list[float], q: float) -> float:
    return float(_np().percentile(values, q)) if values else 0.0


def variant_summary(records: list[RunRecord], k: int) -> dict[str, Any]:
    """One variant's figures, from its runs' records.

    ``pass_at_1``, ``pass_hat_k``, ``tokens`` and ``cost_usd`` (means per run), their totals,
    ``p50_ms``/``p95_ms`` of run latency (milliseconds), and ``cases`` (per case figures; a
    case with a ``recording`` also has ``left_recording``: where its runs left the recorded
    trajectory, one line per distinct place, empty when every run followed it).
    """
    by_case: dict[str, list[RunRecord]] = defaultdict(list)
    for r in records:
        by_case[r.case_id].append(r)
    cases: dict[str, dict[str, Any]] = {}
    for cid, rs in sorted(by_case.items()):
        c = sum(r.passed for r in rs)
        cases[cid] = {
            "runs": len(rs),
            "passed": c,
            "pass_at_1": c / len(rs),
            "pass_hat_k": pass_hat_k(c, len(rs), k),
            "statuses": sorted({r.status for r in rs}),
        }
        followed = [sc for r in rs for sc in r.scores if sc.name == "recording"]
        if followed:  # a captured case: where the runs left the recorded trajectory
            cases[cid]["left_recording"] = sorted(
                {sc.detail for sc in followed if sc.passed is False}
            )
    lat = [r.latency_ms for r in records]
    n = max(len(records), 1)
    return {
        "runs": len(records),
        "pass_at_1": _mean([v["pass_at_1"] for v in cases.values()]) if cases else 0.0,
        "pass_hat_k": _mean([v["pass_hat_k"] for v in cases.values()]) if cases else 0.0,
        "k": k,
        "tokens": sum(r.tokens for r in records) / n,
        "tokens_total": sum(r.tokens for r in records),
        "cost_usd": sum(r.cost_usd for r in records) / n,
        "cost_usd_total": sum(r.cost_usd for r in records),
        "p50_ms": _percentile(lat, 50),
        "p95_ms": _percentile(lat, 95),
        "cases": cases,
    }


def _interval(diffs: list[float]) -> tuple[float, float]:
    if len(diffs) < 2 or len(set(diffs)) == 1:
        d = diffs[0] if diffs else 0.0
        return d, d
    np = _np()
    res = _stats().bootstrap(
        (np.array(diffs),),
        np.mean,
        confidence_level=CONFIDENCE,
        n_resamples=BOOTSTRAP_RESAMPLES,
        method="percentile",
        random_state=0,  # scipy's old name of rng: the same resamples
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _binom_p(k: int, n: int) -> float:
    """Two-sided exact binomial test of ``k`` successes in ``n`` at p = 0.5."""
    return float(_stats().binomtest(k, n, 0.5).pvalue)


def compare(
    base: list[RunRecord], cand: list[RunRecord], names: tuple[str, str], k: int
) -> dict[str, Any]:
    """The paired comparison of ``cand`` against ``base`` over the cases both ran.

    Returns ``{"baseline", "candidate", "cases", "difference", "ci_low", "ci_high",
    "confidence", "mcnemar_p", "discordant": {"baseline_only", "candidate_only"},
    "delta_tokens", "delta_cost_usd", "delta_p95_ms"}``; ``difference`` is the mean over cases of
    (candidate pass@1 - baseline pass@1), the interval a bootstrap over cases.
    """
    a, b = variant_summary(base, k), variant_summary(cand, k)
    shared = sorted(set(a["cases"]) & set(b["cases"]))
    diffs = [b["cases"][c]["pass_at_1"] - a["cases"][c]["pass_at_1"] for c in shared]
    low, high = _interval(diffs)
    pa = {(r.case_id, r.repeat): r.passed for r in base}
    pb = {(r.case_id, r.repeat): r.passed for r in cand}
    pairs = [key for key in pa if key in pb]
    only_a = sum(pa[p] and not pb[p] for p in pairs)
    only_b = sum(pb[p] and not pa[p] for p in pairs)
    p_value = 1.0 if only_a + only_b == 0 else float(_binom_p(only_b, only_a + only_b))
    return {
        "baseline": names[0],
        "candidate": names[1],
        "cases": len(shared),
        "difference": _mean(diffs) if diffs else 0.0,
        "ci_low": low,
        "ci_high": high,
        "confidence": CONFIDENCE,
        "mcnemar_p": p_value,
        "discordant": {"baseline_only": only_a, "candidate_only": only_b},
        "delta_tokens": b["tokens"] - a["tokens"],
        "delta_cost_usd": b["cost_usd"] - a["cost_usd"],
        "delta_p95_ms": b["p95_ms"] - a["p95_ms"],
    }


def build_report(progress: SuiteProgress) -> dict[str, Any]:
    """The JSON report of a suite (docs/contract.md).

    ``suite_id``, ``dataset``, ``done``, ``runs``, ``variants`` (name -> :func:`variant_summary`)
    and ``comparison`` (the second variant against the first, :func:`compare`; None with one).
    """
    by_variant: dict[str, list[RunRecord]] = {v.name: [] for v in progress.variants}
    for r in progress.records:
        by_variant.setdefault(r.variant, []).append(r)
    k = progress.repeat
    names = [v.name for v in progress.variants]
    comparison = None
    if len(names) >= 2:
        comparison = compare(by_variant[names[0]], by_variant[names[1]], (names[0], names[1]), k)
    return {
        "suite_id": progress.suite_id,
        "dataset": progress.dataset,
        "done": progress.done,
        "runs": len(progress.records),
        "total": progress.total,
        "variants": {n: variant_summary(rs, k) for n, rs in by_variant.items()},
        "comparison": comparison,
    }
