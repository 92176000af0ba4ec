"""Compaction carried out: count the transcript's new messages, plan, summarise, rewrite.

The plan is pure (:func:`workflows.compaction.plan_compaction`); this module runs the
``tokens.count`` and summary ``model.complete`` activities it needs, only when
:func:`workflows.turn.needs_token_count` says the transcript may be over its budget.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.charges as charges
    import workflows.transcript as transcript
    import workflows.turn as turn
    from activities.contracts import ModelReply
    from activities.interfaces import model_complete, tokens_count
    from workflows.compaction import (
        CompactionPlan,
        plan_compaction,
        summary_request,
        truncate_tool_results,
    )

if TYPE_CHECKING:
    from workflows.run_context import RunContext


class CompactionStep:
    """Keeps the transcript within the model's context window."""

    def __init__(self, ctx: RunContext) -> None:
        """Work on ``ctx``; creates no command."""
        self.ctx = ctx

    async def maybe_compact(self) -> None:
        """Compact if needed, counting only messages not counted before.

        While :func:`turn.needs_token_count` says the transcript's upper bound stays under the
        budget no activity runs; otherwise ``tokens.count`` counts just the new messages, so a
        long run neither counts its whole transcript every turn nor stores that count in its history.
        """
        s, pinned = self.ctx.s, self.ctx.pinned()
        comp = pinned.spec.compaction
        budget = comp.budget_tokens()
        if turn.needs_token_count(s, pinned.tools, budget):
            await self._compact(await self._count_and_plan())

    async def _count_and_plan(self) -> CompactionPlan | None:
        """Count what is not counted yet with ``tokens.count`` and plan a compaction.

        Returns None when no compaction is needed, or when the counts do not fit the transcript
        (logged: a plain exception here would retry the workflow task forever).
        """
        s, pinned = self.ctx.s, self.ctx.pinned()
        comp = pinned.spec.compaction
        known, tools_known = s.transcript.token_counts, s.transcript.tools_tokens
        new = s.transcript.messages[len(known) :]
        inp, opts = options.tokens_count(
            pinned, self.ctx.req(), new, tools_known is None, len(s.transcript.messages)
        )
        counts = await workflow.execute_activity(tokens_count, inp, **opts)
        tools_tokens = counts.tools if tools_known is None else tools_known
        transcript.counted(s, known + counts.per_message, tools_tokens)
        try:
            return plan_compaction(
                s.transcript.messages,
                s.transcript.token_counts,
                tools_tokens,
                comp.context_window,
                comp.output_reserve,
                comp.threshold,
            )
        except ValueError as e:
            workflow.logger.warning("compaction skipped", extra={"error": str(e)})
            return None

    async def _compact(self, plan: CompactionPlan | None) -> None:
        """Carry out a compaction plan (None: nothing to do)."""
        if plan is None:
            return
        s, comp = self.ctx.s, self.ctx.pinned().spec.compaction
        summary: str | None = None
        if comp.summarize and plan.dropped:
            summary = await self._summarize([s.transcript.messages[i] for i in plan.dropped])
        compacted = plan.apply(s.transcript.messages, summary=summary)
        if not plan.fits:
            # even the messages that must stay are too long: shorten tool results to fit
            budget_chars = int(plan.target * 3)
            compacted = truncate_tool_results(
                compacted, max(500, budget_chars // max(1, len(compacted)))
            )
        transcript.compacted(s, compacted)  # rewritten: counted afresh next time
        workflow.logger.info(
            "context compacted",
            extra={
                "dropped": len(plan.dropped),
                "before": plan.tokens_before,
                "after": plan.tokens_after,
                "fits": plan.fits,
            },
        )

    async def _summarize(self, dropped: list[dict[str, Any]]) -> str | None:
        """A model step of its own that summarises the dropped messages (None if it fails)."""
        s = self.ctx.s
        inp, opts = options.model_complete(
            self.ctx.pinned(),
            self.ctx.req(),
            s.turn,
            summary_request(dropped),
            summary_of=len(dropped),
            stream=self.ctx.events.watched(),
        )
        # the summary is a model step of the event stream too (its text deltas are bracketed)
        self.ctx.emit("model_started", model=inp.model, purpose="summary")
        try:
            reply = await workflow.execute_activity(model_complete, inp, **opts)
        except ActivityError:
            self.ctx.emit("model_finished", reply=ModelReply(model=inp.model))
            return None
        self.ctx.emit("model_finished", reply=reply)
        charges.add(s, reply.usage)
        return reply.content
