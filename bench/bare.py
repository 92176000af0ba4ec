"""A bare Temporal workflow doing what one agent turn does: two activities in sequence.

The floor under the runtime's per-turn figure: ``bench.model`` and ``bench.tool`` return at once
(no HTTP, no payload beyond an int), the workflow has no state, no policy, no handlers.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow

BARE_MODEL = "bench.model"
BARE_TOOL = "bench.tool"


@activity.defn(name=BARE_MODEL)
async def bare_model(n: int) -> int:
    """Stands in for a model step."""
    return n


@activity.defn(name=BARE_TOOL)
async def bare_tool(n: int) -> int:
    """Stands in for a tool call."""
    return n + 1


@workflow.defn(name="BenchBareTurns")
class BareTurns:
    """``turns`` times: one ``bench.model`` then one ``bench.tool`` activity."""

    @workflow.run
    async def run(self, turns: int) -> int:
        """Run ``turns`` turns; returns the last activity's result."""
        n = 0
        for _ in range(turns):
            n = await workflow.execute_activity(
                bare_model, n, start_to_close_timeout=timedelta(seconds=30)
            )
            n = await workflow.execute_activity(
                bare_tool, n, start_to_close_timeout=timedelta(seconds=30)
            )
        return n
