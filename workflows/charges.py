"""What a run is charged and may spend: owner of the run state's ``budget`` part.

The only module that changes :class:`workflows.run_parts.Budget` (``RunData.budget``: usage,
the limits, sandbox seconds, model steps, the budget pause); the others call the functions here.
The judge's tokens and sandboxed tool time are priced by the pinned spec's ``pricing``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from activities.usage import Usage

if TYPE_CHECKING:
    from activities.judge import JudgeVerdict
    from workflows.models import RaiseBudgetSignal, RunData
    from workflows.run_context import RunContext


def add(s: RunData, used: Usage) -> None:
    """Add ``used`` (a model step's, a compaction's or a child run's usage) to the run's usage."""
    s.budget.usage = s.budget.usage.add(used)


def model_step(s: RunData, model: str, duration_ms: float, used: Usage) -> None:
    """Record which model answered the step (``RunResult.model_steps``), its time (ms) and usage."""
    s.budget.model_steps.append(
        {
            "turn": s.turn,
            "model": model,
            "duration_ms": duration_ms,
            "usage": used.model_dump(mode="json"),
        }  # fmt: skip
    )


def set_limits(
    s: RunData, tokens: int | None, cost_usd: float | None, sandbox: float | None
) -> None:
    """The run's budget at start: total tokens, cost (USD) and sandbox seconds (None: no limit)."""
    s.budget.max_total_tokens = tokens
    s.budget.max_cost_usd = cost_usd
    s.budget.max_sandbox_seconds = sandbox


def raise_limits(s: RunData, sig: RaiseBudgetSignal) -> None:
    """Signal ``raise_budget``: the limits it names replace the run's (the others stay)."""
    if sig.max_total_tokens is not None:
        s.budget.max_total_tokens = sig.max_total_tokens
    if sig.max_cost_usd is not None:
        s.budget.max_cost_usd = sig.max_cost_usd
    if sig.max_sandbox_seconds is not None:
        s.budget.max_sandbox_seconds = sig.max_sandbox_seconds


def pause_for_budget(s: RunData, paused: bool) -> None:
    """Note the run paused on its budget (True), or no longer (False)."""
    s.budget.budget_paused = paused


def judge(ctx: RunContext, verdict: JudgeVerdict) -> None:
    """Count the judge's tokens in the run's usage, priced by the spec's ``pricing`` (USD/Mtok)."""
    s, pricing = ctx.s, ctx.pinned().spec.pricing
    p, c = verdict.prompt_tokens, verdict.completion_tokens
    cost = (p * pricing.prompt_per_mtok + c * pricing.completion_per_mtok) / 1_000_000
    add(s, Usage(prompt_tokens=p, completion_tokens=c, total_tokens=p + c, cost_usd=cost))


def sandbox(ctx: RunContext, duration_ms: float) -> None:
    """Count a sandboxed call's time (ms) against the sandbox budget (``sandbox_seconds``).

    Its price (``pricing.sandbox_per_second``, USD) goes into the run's cost.
    """
    s, price = ctx.s, ctx.pinned().spec.pricing.sandbox_per_second
    s.budget.sandbox_seconds = round(s.budget.sandbox_seconds + duration_ms / 1000, 3)
    if price:
        add(s, Usage(cost_usd=duration_ms / 1000 * price))
