"""What a run is charged beside its model steps: the judge's tokens and sandboxed tool time.

Both add to the run's usage (``RunData.usage``), priced by the pinned spec's ``pricing``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from activities.usage import Usage

if TYPE_CHECKING:
    from activities.judge import JudgeVerdict
    from workflows.run_context import RunContext


def judge(ctx: RunContext, verdict: JudgeVerdict) -> None:
    """Count the judge's tokens in the run's usage, priced by the spec's ``pricing`` (USD/Mtok)."""
    s, pricing = ctx.s, ctx.pinned().spec.pricing
    p, c = verdict.prompt_tokens, verdict.completion_tokens
    cost = (p * pricing.prompt_per_mtok + c * pricing.completion_per_mtok) / 1_000_000
    s.usage = s.usage.add(
        Usage(prompt_tokens=p, completion_tokens=c, total_tokens=p + c, cost_usd=cost)
    )


def sandbox(ctx: RunContext, duration_ms: float) -> None:
    """Count a sandboxed call's time (ms) against the sandbox budget (``sandbox_seconds``).

    Its price (``pricing.sandbox_per_second``, USD) goes into the run's cost.
    """
    s, price = ctx.s, ctx.pinned().spec.pricing.sandbox_per_second
    s.sandbox_seconds = round(s.sandbox_seconds + duration_ms / 1000, 3)
    if price:
        s.usage = s.usage.add(Usage(cost_usd=duration_ms / 1000 * price))
