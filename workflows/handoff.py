"""Handoffs: ``handoff_to_<NAME>`` continues the same run with another agent's spec.

The call itself only records the wish (the model is told the handover happens); at the end of
the turn the run resolves and pins the other agent's spec (``spec.resolve``), takes its system
prompt, tools and policy, keeps the transcript and the run's limits, and appends the agent to
the run's ``lineage``. When a reply holds several handoffs the first wins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.children as children
    import workflows.transcript as transcript
    import workflows.turn as turn
    from activities.interfaces import spec_resolve
    from activities.spec import Limits, PinnedSpec
    from workflows.run_context import Stop, cause_message

if TYPE_CHECKING:
    from workflows.run_context import RunContext


def handoff_text(agent: str, already: str | None) -> tuple[str, str]:
    """``(status, text)`` of a ``handoff_to_<agent>`` call; ``already``: a handoff of this turn."""
    if already is not None and already != agent:
        return "error", f"This turn already hands over to {already}; {agent} was not asked."
    return "ok", f"Handing the conversation over to the agent {agent}."


def with_system_prompt(messages: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """The transcript with its system message replaced by ``prompt`` (added when missing)."""
    if messages and messages[0].get("role") == "system":
        return [{"role": "system", "content": prompt}, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]


def keep_limits(new: PinnedSpec, old: Limits) -> PinnedSpec:
    """``new`` with the run's limits kept (the turn count and deadline go on across agents)."""
    spec = new.spec.model_copy(update={"limits": old})
    return new.model_copy(update={"spec": spec})


class HandoffStep:
    """Records and carries out handoffs on the run's context."""

    def __init__(self, ctx: RunContext) -> None:
        """Work on ``ctx``; creates no command."""
        self.ctx = ctx

    def ask(self, agent: str) -> turn.Settled:
        """The ``handoff_to_*`` call: note the handover for the end of the turn; how it ended."""
        s = self.ctx.s
        status, text = handoff_text(agent, s.delegation.handoff_to)
        if status == "ok":
            children.note_handoff(s, agent)
        return turn.Settled("ok" if status == "ok" else "error", text)

    async def apply(self) -> None:
        """At the end of a turn: pin the other agent's spec and carry on with it.

        Raises:
            Stop: ``failed`` when the other agent's spec cannot be resolved.
        """
        ctx = self.ctx
        s = ctx.s
        agent = children.take_handoff(s)
        if agent is None:
            return
        old = ctx.pinned()
        req = ctx.req().model_copy(update={"agent": agent})
        inp, opts = options.spec_resolve(req, old.workflow_rev)
        try:
            pinned = await workflow.execute_activity(spec_resolve, inp, **opts)
        except ActivityError as e:
            raise Stop("failed", f"handoff to {agent} failed", error=cause_message(e)) from None
        children.handed_over(s, old.spec.name, agent)
        s.pinned = keep_limits(pinned, old.spec.limits)
        transcript.rewritten(
            s,
            with_system_prompt(s.transcript.messages, pinned.spec.system_prompt),
            pinned.tools_tokens,
        )
        ctx.emit("handoff", from_agent=old.spec.name, to_agent=agent, spec_hash=pinned.spec_hash)
        ctx.publish()
