"""The model step: one ``model.complete`` activity per turn, and the local calls riding it.

:class:`ModelStep` works on the run's :class:`workflows.run_context.RunContext`: it counts the
turn, races the activity against interrupts and the deadline, falls back to the next model when
one fails (:mod:`workflows.model_choice`), tells the model when its output could not be parsed,
and records the step (usage, what memory gave the model, the step's duration).

:class:`ToolsFirst` (owner of the run state's ``held`` part): local tools' calls riding the next
model step, one activity instead of a local activity and a step. A turn whose calls are all of
local tools (``ToolInfo.local``: short, read-only) and all allowed by the policy needs no person
and no queue of its own, so they are held for the next model step: that step's
``model.complete`` activity runs them first (``CallModelInput.tools_first``,
``RuntimeActivities.run_first``), writes their results into the transcript, then asks the model.
Per such turn the run saves a ``MarkerRecorded`` event and a Temporal Cloud action (the marker's
workflow task), and the results enter the history once, in the step's result. Why and what it
costs: docs/throughput.md, "Local tools ride the next model step". Gated by patch
``tools-in-model-step`` and the spec's ``local_tools_in_model_step``. Any other call (one the
policy asks a person about, ``write_file`` by default) goes to the tool step
(:mod:`workflows.tool_calls`).

A held call is recorded (``running``) and announced (``tool_started``) at once, and its ``tool``
message is written empty, so messages that come in before the step (a steer) stay after it. The
calls run as local activities after all (:meth:`ToolsFirst.flush`) when the step cannot take them:
a model on its own queue (its workers run no tools), compaction due, continue-as-new. A step that
finds the filled transcript may be over the compaction budget returns without asking the model
(``ModelReply.model_skipped``); the workflow compacts and asks in a new step.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.charges as charges
    import workflows.model_choice as model_choice
    import workflows.render as render
    import workflows.transcript as transcript
    import workflows.turn as turn
    from activities.contracts import (
        ERR_MODEL_OUTPUT_INVALID,
        CallModelInput,
        ModelReply,
        StepToolCall,
        ToolCallRequest,
        ToolInfo,
        ToolOutcome,
        fill_tool_messages,
    )
    from activities.interfaces import model_complete
    from workflows.guardrails import withheld_reply_note
    from workflows.models import ToolCallRecord
    from workflows.policy import decide, parse_arguments
    from workflows.run_context import RunContext, Stop, cause_message
    from workflows.tool_calls import ToolStep
    from workflows.tool_runners import kind_of

if TYPE_CHECKING:
    from workflows.guardrails import GuardrailStep


class ModelStep:
    """Runs the model steps of one run."""

    def __init__(
        self, ctx: RunContext, first: ToolsFirst, guard: GuardrailStep | None = None
    ) -> None:
        """Work on ``ctx``; creates no command.

        ``first`` holds tool calls for the next step (:class:`ToolsFirst`); ``guard``
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
        ctx.refresh_listing(ends_turn=not reply.tool_calls)  # TotalTokens, CostUsd
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


class ToolsFirst:
    """Holds a turn's local tool calls for the next model step, and settles them from its reply."""

    def __init__(self, ctx: RunContext, tools: ToolStep) -> None:
        """Work on ``ctx``; calls that must run after all run through ``tools``. No command here."""
        self.ctx = ctx
        self._tools = tools

    def hold(self, calls: list[ToolCallRequest]) -> bool:
        """Hold ``calls`` for the next model step when they may ride it; False: run them now.

        They may when the run took the patch, is not a replay (``recorded_tools``), every call is of a local tool (no queue, MCP
        server or sandbox of its own) that the policy allows, the next step goes ahead (no turn
        or budget limit stops the run first), its model runs on the run's own queue, and the
        transcript is far enough under the compaction budget that no count is due.
        """
        ctx = self.ctx
        s, pinned, req = ctx.s, ctx.pinned(), ctx.req()
        spec = pinned.spec
        if not s.tools_in_step or not spec.local_tools_in_model_step or not calls:
            return False
        if req.recorded_tools is not None:  # a replay: the tool step answers from the recording
            return False
        tools = {t.name: t for t in pinned.tools}
        if any(not self._may_ride(c, tools.get(c.name)) for c in calls):
            return False
        if not isinstance(turn.after_tools(s, spec.limits), turn.CallModel):
            return False
        if not isinstance(turn.before_model(s, spec.limits), turn.CallModel):
            return False
        if spec.model in spec.rate_limits or turn.needs_token_count(
            s, pinned.tools, spec.compaction.budget_tokens()
        ):
            return False
        records, _ = self._tools.apply_policy(calls, tools)
        for call, rec in zip(calls, records, strict=True):
            info = tools[call.name]
            rec.status = "running"
            arguments = rec.arguments if isinstance(rec.arguments, dict) else call.arguments
            inp, _ = options.tool_invoke(pinned, req, s.turn, call, arguments, info, s.run_files)
            s.held.tools_first.append(
                StepToolCall(
                    call=inp, timeout_seconds=info.timeout_seconds, max_attempts=info.max_attempts
                )
            )
            ctx.tool_started(rec)
            transcript.add(s, {"role": "tool", "tool_call_id": call.id, "content": ""})
        ctx.publish()
        return True

    def _may_ride(self, call: ToolCallRequest, info: ToolInfo | None) -> bool:
        ctx = self.ctx
        if kind_of(info, local_activities=True) != "local_activity":  # tool_runners.py
            return False
        decision = decide(
            ctx.pinned().spec.policy, info, call.id, call.name, call.arguments,
            self._tools.cedar_facts(), self._tools.policy_search(),
        )  # fmt: skip
        return decision.action == "allow"

    async def attach(
        self, inp: CallModelInput, opts: workflow.ActivityConfig
    ) -> CallModelInput | None:
        """``inp`` with the held calls and the room the compaction budget leaves.

        None when the step cannot take them (a model on its own queue, whose workers run no
        tools): then they have run here (:meth:`flush`), and the caller builds the step again.
        """
        s = self.ctx.s
        if not s.held.tools_first:
            return inp
        if "task_queue" in opts:
            await self.flush()
            return None
        note = render.tools_first_note(
            [(f.call.name, _shown(f.call.arguments)) for f in s.held.tools_first]
        )
        opts["summary"] = f"{opts.get('summary', '')} {note}".strip()
        return inp.model_copy(
            update={
                "tools_first": list(s.held.tools_first),
                "token_room": int(self.ctx.pinned().spec.compaction.budget_tokens())
                - sum(s.transcript.token_counts)
                - turn.tools_tokens_bound(s, self.ctx.pinned().tools),
                "counted_messages": len(s.transcript.token_counts),
            }
        )

    async def before_compaction(self) -> None:
        """Run the held calls now if the transcript may be over the compaction budget.

        (Messages that came in since they were held, a steer, can take it there; compaction
        must see their results.)
        """
        s, pinned = self.ctx.s, self.ctx.pinned()
        budget = pinned.spec.compaction.budget_tokens()
        if s.held.tools_first and turn.needs_token_count(s, pinned.tools, budget):
            await self.flush()

    def settle(self, outcomes: list[ToolOutcome], published: bool = False) -> None:
        """Record the held calls from their outcomes and fill their ``tool`` messages.

        ``published``: the step published their ``tool_finished`` events (a watched run,
        ``ModelReply.tool_events_published``); they are not emitted again.
        """
        s = self.ctx.s
        if not s.held.tools_first:
            return
        tools = {t.name: t for t in self.ctx.pinned().tools}
        by_id = {o.call_id: o for o in outcomes}
        texts: dict[str, str] = {}
        for first in s.held.tools_first:
            call = first.call
            rec = self._record_of(call.call_id)
            out = by_id.get(call.call_id) or ToolOutcome(
                call_id=call.call_id,
                name=call.name,
                status="error",
                content="The tool call's result did not come back from the model step.",
                failure="no result",
            )
            texts[call.call_id] = self._tools.settle(
                rec, out, tools.get(call.name), announce=not published
            )
        self._fill(texts)
        s.held.tools_first.clear()

    def settle_from_failure(self, error: ActivityError) -> None:
        """Record the held calls from a failed step's ``tool_outcomes`` detail, if it has one.

        The step ran them, then the model failed (``activities.model_parts.with_outcomes``); a step
        that timed out or was cancelled has none, and the calls stay held.
        """
        cause = error.cause
        if not self.ctx.s.held.tools_first or not isinstance(cause, ApplicationError):
            return
        for raw in cause.details:
            detail = cast("dict[str, Any]", raw) if isinstance(raw, dict) else {}
            if "tool_outcomes" in detail:
                try:
                    outcomes = [
                        ToolOutcome.model_validate(o)
                        for o in cast("list[Any]", detail["tool_outcomes"])
                    ]
                except (ValidationError, TypeError):
                    return  # unreadable: the calls stay held and run again
                self.settle(outcomes, published=detail.get("published") is True)
                return

    async def flush(self) -> None:
        """Run the held calls now, as local activities, and fill their messages.

        Raises:
            Stop: an interrupt or the deadline came first.
        """
        s = self.ctx.s
        if not s.held.tools_first:
            return
        held, tools = list(s.held.tools_first), {t.name: t for t in self.ctx.pinned().tools}
        running: dict[str, asyncio.Future[str]] = {}
        records: list[ToolCallRecord] = []
        for first in held:
            call = first.call
            rec = self._record_of(call.call_id)
            request = ToolCallRequest(
                id=call.call_id,
                name=call.name,
                arguments=call.arguments
                if isinstance(call.arguments, str)
                else json.dumps(call.arguments),
            )
            records.append(rec)
            running[call.call_id] = asyncio.ensure_future(
                self._tools.invoke(request, rec, tools.get(call.name), announce=False)
            )
        outcomes: dict[str, str] = {}
        await self._tools.gather(running, records, outcomes, bounded=True)  # Stop: drop() fills
        s.held.tools_first.clear()
        self._fill(outcomes)

    def drop(self) -> None:
        """The run ends with calls still held: they never ran; their messages say so."""
        s = self.ctx.s
        text = turn.settle_failure(False, True, "the run ended first", 0).text
        self._fill({first.call.call_id: text for first in s.held.tools_first})
        s.held.tools_first.clear()

    def _record_of(self, call_id: str) -> ToolCallRecord:
        return next(r for r in reversed(self.ctx.s.tool_calls) if r.id == call_id)

    def _fill(self, texts: dict[str, str]) -> None:
        """Write ``texts`` (call id -> result) into the held calls' empty ``tool`` messages."""
        transcript.fill(self.ctx.s, fill_tool_messages(self.ctx.s.transcript.messages, texts))


def _shown(arguments: str | dict[str, Any]) -> dict[str, Any] | str:
    """Arguments as ``tool.invoke``'s summary shows them (workflows/activity_options.py)."""
    return arguments if isinstance(arguments, dict) else parse_arguments(arguments) or arguments
