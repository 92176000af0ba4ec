"""The run's side of guardrails: the user's messages checked, trips recorded, a ``block`` acted on.

Tool results and the model's text are checked in the activities that produce them
(``tool.invoke``, ``model.complete``): what leaves an activity is already checked, and its
``guardrails`` field says what tripped. The user's messages are the workflow's own: the request
and each ``send_message`` go through local activity ``guardrail.check`` before the model reads
them. Either way :meth:`GuardrailStep.note` records each trip (``RunData.guards.guardrails``, event
``guardrail_tripped``) and :meth:`GuardrailStep.act` ends the run with status ``guardrail`` or
pauses it for a person, as the spec's ``on_trip`` says. Revision 6 (``Versions.guardrails``).

Owner of the run state's ``guards`` part (:class:`workflows.run_parts.Guards`): trips, the block
not acted on yet and the pause for it change here only (:func:`resumed` for signal ``resume``).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.control as control
    from activities.guardrail_models import GuardrailCheckOutput, GuardrailTrip
    from activities.interfaces import guardrail_check
    from workflows.models import RunData
    from workflows.run_context import RunContext, Stop, cause_message


def resumed(s: RunData) -> None:
    """A person resumed the run (signal ``resume``): a block no longer holds it paused."""
    s.guards.guardrail_paused = False


__all__ = ["GuardrailStep", "reason_of", "withheld_reply_note"]


def withheld_reply_note(trip: GuardrailTrip) -> str:
    """What the model is told when its reply was withheld and the run went on (``on_trip: pause``)."""
    return (
        f"Your previous reply was withheld: guardrail {trip.guardrail} blocked it "
        f"({trip.detail}). Answer again without that."
    )


def reason_of(trip: GuardrailTrip) -> str:
    """The ``stopped_reason`` of a run a block ended (no text the guardrail found)."""
    where = {"input": "a user message", "tool_results": "a tool result", "output": "the reply"}
    call = f" of {trip.tool_call_id}" if trip.tool_call_id else ""
    return f"guardrail {trip.guardrail} blocked {where[trip.stage]}{call}: {trip.detail}"


class GuardrailStep:
    """Guardrails of one run, over its :class:`RunContext`."""

    def __init__(self, ctx: RunContext) -> None:
        """Work on ``ctx``; creates no command."""
        self.ctx = ctx

    def on(self) -> bool:
        """Whether this run checks anything (a spec with ``guardrails:``, revision 6)."""
        pinned = self.ctx.s.pinned
        return (
            pinned is not None
            and pinned.spec.guardrails is not None
            and self.ctx.versions.guardrails
        )

    def note(self, trips: list[GuardrailTrip], tool_call_id: str | None = None) -> None:
        """Record ``trips`` in the run and its event stream; keep the first ``block`` for :meth:`act`.

        No command: safe anywhere the run records an activity's result.
        """
        s = self.ctx.s
        for trip in trips:
            if tool_call_id is not None and trip.tool_call_id is None:
                trip.tool_call_id = tool_call_id
            trip.turn = trip.turn or s.turn
            s.guards.guardrails.append(trip)
            self.ctx.emit(
                "guardrail_tripped",
                stage=trip.stage,
                guardrail=trip.guardrail,
                action=trip.action,
                detail=trip.detail,
                tool_call_id=trip.tool_call_id,
            )
            if trip.action == "block" and s.guards.guardrail_blocked is None:
                s.guards.guardrail_blocked = trip
        if trips:
            workflow.logger.info(
                "guardrail tripped",
                extra={"guardrails": [(t.stage, t.guardrail, t.action) for t in trips]},
            )

    async def act(self) -> None:
        """Act on a ``block`` noted since the last call: end the run or wait for a person.

        ``on_trip: pause`` holds the run (status ``guardrail_paused``) until ``resume`` (the run
        goes on; what was blocked stays withheld) or ``interrupt``.

        Raises:
            Stop: ``guardrail`` (``on_trip: end``), or ``interrupted`` while paused.
        """
        s = self.ctx.s
        trip = s.guards.guardrail_blocked
        if trip is None or not self.on():
            return
        s.guards.guardrail_blocked = None
        spec = self.ctx.pinned().spec.guardrails
        if spec is None or spec.on_trip == "end":
            raise Stop("guardrail", reason_of(trip))
        workflow.logger.info("guardrail blocked; pausing", extra={"why": reason_of(trip)})
        control.pause(s)
        s.guards.guardrail_paused = True
        await self.ctx.checkpoint()

    async def check_input(self, text: str) -> tuple[str, list[GuardrailTrip]]:
        """``text`` (a user message) through the spec's ``input`` guardrails.

        Returns the text to give the model and the trips (for :meth:`note`, then :meth:`act`).
        One local activity ``guardrail.check`` when there are any (none: no command).

        Raises:
            Stop: ``failed`` when the check itself failed on every attempt.
        """
        if not self.on():
            return text, []
        ctx = self.ctx
        pinned = ctx.pinned()
        guards = options.stage_guardrails(pinned, "input")
        if guards is None:
            return text, []
        inp, opts = options.guardrail_check(pinned, ctx.req(), ctx.s.turn, text, guards)
        try:
            out: GuardrailCheckOutput = await options.execute_local(guardrail_check, inp, opts)
        except ActivityError as e:
            raise Stop("failed", "guardrail check failed", error=cause_message(e)) from None
        return out.text, out.guardrails
