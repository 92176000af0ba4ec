"""Local tools' calls riding the next model step: one activity, not a local activity and a step.

A turn whose calls are all of local tools (``ToolInfo.local``: short, read-only) and all allowed
by the policy needs no person and no queue of its own, so :class:`ToolsFirst` holds them for the
next model step: that step's ``model.complete`` activity runs them first
(``CallModelInput.tools_first``, ``RuntimeActivities.run_first``), writes their results into the
transcript, then asks the model. Per such turn the run saves a ``MarkerRecorded`` event and a
Temporal Cloud action (the marker's workflow task), and the results enter the history once, in
the step's result. Why and what it costs: docs/throughput.md, "Local tools ride the next model
step". Gated by patch ``tools-in-model-step`` and the spec's ``local_tools_in_model_step``.

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
from typing import Any, cast

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.render as render
    import workflows.transcript as transcript
    import workflows.turn as turn
    from activities.contracts import (
        CallModelInput,
        StepToolCall,
        ToolCallRequest,
        ToolInfo,
        ToolOutcome,
        fill_tool_messages,
    )
    from workflows.models import ToolCallRecord
    from workflows.policy import decide, parse_arguments
    from workflows.run_context import RunContext
    from workflows.tool_calls import ToolStep
    from workflows.tool_runners import kind_of


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
