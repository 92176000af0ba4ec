"""The model step: one ``model.complete`` activity per turn, on the spec's models in turn.

:class:`ModelStep` works on the run's :class:`workflows.run_context.RunContext`: it counts the
turn, races the activity against interrupts and the deadline, falls back to the next model when
one fails (:mod:`workflows.model_choice`), tells the model when its output could not be parsed,
and records the step (usage, what memory gave the model, the step's duration).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.charges as charges
    import workflows.model_choice as model_choice
    import workflows.transcript as transcript
    import workflows.turn as turn
    from activities.contracts import ERR_MODEL_OUTPUT_INVALID, CallModelInput, ModelReply
    from activities.interfaces import model_complete
    from workflows.guardrails import withheld_reply_note
    from workflows.run_context import SA_REFRESH_SECONDS, RunContext, Stop, cause_message

if TYPE_CHECKING:
    from workflows.guardrails import GuardrailStep
    from workflows.tools_first import ToolsFirst

SA_REFRESH_TURNS = 5
"""Revision 3: TotalTokens and CostUsd are refreshed after every ``SA_REFRESH_TURNS``-th model step."""


class ModelStep:
    """Runs the model steps of one run."""

    def __init__(
        self, ctx: RunContext, first: ToolsFirst, guard: GuardrailStep | None = None
    ) -> None:
        """Work on ``ctx``; creates no command.

        ``first`` holds tool calls for the next step (workflows/tools_first.py); ``guard``
        records what the reply's text tripped.
        """
        self.ctx = ctx
        self.guard = guard
        self.first = first

    async def step(self) -> ModelReply | None:
        """One turn's model step; None when its output could not be parsed (the model was told).

        Raises:
            Stop: the step failed on every model, too many unparsable replies, an interrupt or
                the deadline.
        """
        ctx = self.ctx
        s, pinned = ctx.s, ctx.pinned()
        s.turn += 1
        ctx.set_status("running")
        ctx.publish()
        try:
            reply = await self._call_models()
        except ActivityError as e:
            cause = e.cause
            if not (isinstance(cause, ApplicationError) and cause.type == ERR_MODEL_OUTPUT_INVALID):
                raise Stop("failed", "model step failed", error=cause_message(e)) from None
            failures = transcript.parse_failed(s)
            nxt = turn.after_parse_failure(
                failures, pinned.spec.max_parse_failures, cause_message(e)
            )
            if isinstance(nxt, turn.Finish):
                raise Stop(nxt.status, nxt.reason, error=nxt.error) from None
            # Tell the model what went wrong and let it try again; the turn counts.
            transcript.add(s, {"role": "user", "content": nxt.note})
            workflow.logger.warning(
                "model output unparsable; told the model", extra={"turn": s.turn}
            )
            return None
        if reply.model_skipped:  # the held calls' results first go through compaction
            s.turn -= 1
            return None
        if reply.tool_calls:  # a repeated id never shares a verdict (patch asked only then)
            taken = {*s.approvals.verdicts, *s.approvals.pending, *(r.id for r in s.tool_calls)}
            calls = turn.unique_call_ids(reply.tool_calls, taken)
            if calls != reply.tool_calls and ctx.versions.unique_call_ids():
                reply = reply.model_copy(update={"tool_calls": calls})
        charges.add(s, reply.usage)
        ctx.emit("model_finished", reply=reply)
        if await self._withheld(reply):
            return None
        # TotalTokens and CostUsd stay current in listings: each upsert is an event and a
        # visibility write on the server, so not one every turn.
        # by turns: a workflow.now() difference must not change commands
        if ctx.versions.refresh_by_turns:
            # revision 4: not when the reply ends the turn (the status upsert that follows
            # carries the same figures in the same workflow task)
            if s.turn % SA_REFRESH_TURNS == 0 and (
                reply.tool_calls or not ctx.versions.upsert_changed_only
            ):
                ctx.upsert_search_attributes()
        elif s.visibility.sa_upserted_at is None or (
            (workflow.now() - s.visibility.sa_upserted_at).total_seconds() >= SA_REFRESH_SECONDS
        ):
            ctx.upsert_search_attributes()
        return reply

    async def _withheld(self, reply: ModelReply) -> bool:
        """Note what the reply's text tripped; True when a ``block`` withheld it.

        A withheld reply is not put in the transcript: the run ends, or waits for a person and
        then tells the model its reply was withheld (workflows/guardrails.py).

        Raises:
            Stop: ``guardrail`` (``on_trip: end``), or ``interrupted`` while paused.
        """
        if not reply.guardrails or self.guard is None:
            return False
        self.guard.note(reply.guardrails)
        blocked = next((t for t in reply.guardrails if t.action == "block"), None)
        if blocked is None:
            return False
        await self.guard.act()  # ends the run, or waits for a person
        transcript.add(self.ctx.s, {"role": "user", "content": withheld_reply_note(blocked)})
        return True

    async def _call_models(self) -> ModelReply:
        """The step on the spec's models in turn (workflows/model_choice.py), recorded when answered.

        Raises:
            ActivityError: the last model tried failed (or the step was not one to fall back from).
            Stop: an interrupt or the deadline came first.
        """
        ctx = self.ctx
        s, pinned = ctx.s, ctx.pinned()
        models, index = pinned.spec.models(), 0
        while True:
            name = models[index]
            inp, opts = options.model_complete(
                pinned,
                ctx.req(),
                s.turn,
                s.transcript.messages,
                model=name,
                stream=ctx.events.watched(),
            )
            if s.held.tools_first:
                with_calls = await self.first.attach(inp, opts)
                if with_calls is None:  # they ran as local activities: the messages changed
                    continue
                inp = with_calls
            opts = ctx.with_deadline(opts)
            ctx.emit("model_started", model=name)
            try:
                reply = await ctx.race(lambda i=inp, o=opts: _complete(i, o), bounded=True)
            except (ActivityError, Stop) as e:
                # the step ends with nothing from it: subscribers drop its partial text
                ctx.emit("model_finished", reply=ModelReply(model=name))
                if isinstance(e, Stop):
                    raise
                self.first.settle_from_failure(e)  # calls that ran before the model failed
                fallback = model_choice.next_model(models, index, e)
                if fallback is None:
                    raise
                workflow.logger.warning(
                    "model step failed; trying the next model",
                    extra={"turn": s.turn, "model": name, "next": fallback},
                )
                index += 1
                continue
            self.first.settle(reply.tool_outcomes, reply.tool_events_published)
            if reply.model_skipped:
                ctx.emit("model_finished", reply=reply)
                return reply
            s.memory = [m.id for m in reply.memory]
            if reply.memory:
                ctx.emit("memory_retrieved", ids=s.memory)
            charges.model_step(s, name, reply.latency_ms, reply.usage)
            return reply


async def _complete(inp: CallModelInput, opts: workflow.ActivityConfig) -> ModelReply:
    """The ``model.complete`` activity with ``opts`` (workflows/activity_options.py)."""
    return await workflow.execute_activity(model_complete, inp, **opts)
