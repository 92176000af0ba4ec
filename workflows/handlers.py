"""What clients send a run (docs/contract.md): the signals, updates and queries of ``AgentRun``.

:class:`RunHandlers` is ``AgentRun``'s one base class. Handlers take ``*args`` (any number of
payloads, each plain JSON data) and decode them with :mod:`workflows.inbound`: an invalid signal
is recorded in ``state.ignored_signals`` with why, an invalid update is refused by its validator;
nothing a client sends can fail a workflow task. Handlers only change the run state
(:class:`workflows.models.RunData`, through the run's :class:`workflows.run_context.RunContext`);
the loop in :mod:`workflows.agent_run` acts on it.

The decisions' handlers (signals ``approve``/``reject``, update ``decide``) are in
:mod:`workflows.approvals`, with the decisions they hand over: :class:`RunHandlers` extends its
:class:`workflows.approvals.DecisionHandlers`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, get_args

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    import workflows.charges as charges
    import workflows.control as control
    import workflows.guardrails as guardrails
    import workflows.state as state
    import workflows.turn as turn
    from workflows.approvals import DecisionHandlers
    from workflows.child_rules import CHILD_APPROVALS_SIGNAL, ChildApprovals
    from workflows.inbound import Invalid, decode_args
    from workflows.models import (
        AddMessageResult,
        AddMessageUpdate,
        InterruptSignal,
        MessageSignal,
        PrincipalSignal,
        RaiseBudgetSignal,
        RunState,
        RunStatus,
        ToolResultAnswer,
        ToolResultUpdate,
    )
    from workflows.signals import (  # defined with the decide update, for clients (workers.client)
        DECISION_NOT_YET_RECORDED as DECISION_NOT_YET_RECORDED,
    )
    from workflows.signals import DECISION_REFUSED as DECISION_REFUSED

if TYPE_CHECKING:
    from workflows.approvals import Decisions
    from workflows.children import ChildStep
    from workflows.client_tools import ClientTools
    from workflows.run_context import RunContext

MESSAGE_REFUSED = "MessageRefused"
"""Error type of an ``add_message`` the validator refused: not retryable, the message says why."""
TOOL_RESULT_REFUSED = "ToolResultRefused"
"""Error type of a ``tool_result`` the validator refused: not retryable, the message says why."""


_ENDED = frozenset(get_args(RunStatus))
"""The statuses of a run that has ended (``add_message`` refuses them)."""


class RunHandlers(DecisionHandlers):
    """The message handlers of ``AgentRun`` (its one base class).

    They decode what a client sent and change the run state through the run's context
    (``self._ctx``); the decisions' handlers are inherited from
    :class:`workflows.approvals.DecisionHandlers` (forwarding a decision to a child run is the
    only command a handler creates: a signal to the child).
    """

    _ctx: RunContext
    _children: ChildStep
    _decisions: Decisions
    _client: ClientTools

    @workflow.update(name="tool_result")
    def tool_result(self, *args: Any) -> ToolResultAnswer:
        """The result of a call of a tool the client runs: :class:`ToolResultUpdate`."""
        upd = decode_args(args, ToolResultUpdate, "update tool_result")
        if isinstance(upd, Invalid):  # refused by the validator before it gets here
            raise ApplicationError(upd.problem, type="InvalidPayload", non_retryable=True)
        return self._client.take(upd)

    @tool_result.validator
    def _validate_tool_result(self, *args: Any) -> None:
        upd = decode_args(args, ToolResultUpdate, "update tool_result")
        if isinstance(upd, Invalid):
            raise ApplicationError(upd.problem, type=TOOL_RESULT_REFUSED, non_retryable=True)
        if self._client.unconfirmed(upd.tool_call_id):
            raise ApplicationError(
                f"tool call {upd.tool_call_id} is not recorded in the run's history yet; retry",
                type=DECISION_NOT_YET_RECORDED,
            )
        problem = self._client.problem(upd)
        if problem:
            raise ApplicationError(problem, type=TOOL_RESULT_REFUSED, non_retryable=True)

    @workflow.signal(name="interrupt")
    def interrupt(self, *args: Any) -> None:
        """Stop at the next safe point; in-flight activities are cancelled: :class:`InterruptSignal`."""
        sig = self._payload(args, InterruptSignal, "interrupt")
        if sig is None:
            return
        if not control.interrupt(self._ctx.s, sig):
            self._ctx.ignore("interrupt", sig.principal_id, "already interrupted")

    @workflow.signal(name="pause")
    def pause(self, *args: Any) -> None:
        """Hold the run before its next step: :class:`PrincipalSignal`."""
        sig = self._payload(args, PrincipalSignal, "pause")
        if sig is None:
            return
        if self._ctx.s.control.paused:
            self._ctx.ignore("pause", sig.principal_id, "already paused")
        control.pause(self._ctx.s)

    @workflow.signal(name="resume")
    def resume(self, *args: Any) -> None:
        """Let a paused run go on: :class:`PrincipalSignal`."""
        sig = self._payload(args, PrincipalSignal, "resume")
        if sig is None:
            return
        s = self._ctx.s
        if not s.control.paused:
            self._ctx.ignore("resume", sig.principal_id, "not paused")
        elif s.budget.budget_paused and turn.budget_exceeded(s) is not None:
            self._ctx.ignore("resume", sig.principal_id, "over budget: raise it with raise_budget")
            return
        control.resume(s)
        charges.pause_for_budget(s, False)
        guardrails.resumed(s)

    @workflow.signal(name="send_message")
    def send_message(self, *args: Any) -> None:
        """Add a user message (steering, or a conversation's next turn): :class:`MessageSignal`."""
        sig = self._payload(args, MessageSignal, "send_message")
        if sig is not None:
            control.add_message(self._ctx.s, sig)

    @workflow.update(name="add_message")
    async def add_message(self, *args: Any) -> AddMessageResult:
        """Add a user message, answered once the run holds it: :class:`AddMessageUpdate`.

        The same as signal ``send_message`` (the next turn of a conversation, or steering), but
        the sender learns it was accepted and the event stream's offset its events follow from
        (:class:`AddMessageResult`). Sent with update-with-start by the AG-UI edge: in a run
        that this very request started, the handler first waits for the run to take its input
        (no command), and a ``message_id`` equal to ``RunRequest.input_id`` is not added again.
        """
        upd = decode_args(args, AddMessageUpdate, "update add_message")
        if isinstance(upd, Invalid):  # refused by the validator before it gets here
            raise ApplicationError(upd.problem, type="InvalidPayload", non_retryable=True)
        await workflow.wait_condition(lambda: self._ctx.s.req is not None)
        s = self._ctx.s
        req = s.req
        if req is not None and upd.message_id is not None and upd.message_id == req.input_id:
            return AddMessageResult(duplicate=True, offset=0, turn=s.turn)
        offset = self._ctx.events.offset
        control.add_message(
            s,
            MessageSignal(
                content=upd.content, principal_id=upd.principal_id, client_tools=upd.client_tools
            ),
        )
        return AddMessageResult(offset=offset, turn=s.turn)

    @add_message.validator
    def _validate_add_message(self, *args: Any) -> None:
        upd = decode_args(args, AddMessageUpdate, "update add_message")
        if isinstance(upd, Invalid):
            raise ApplicationError(upd.problem, type=MESSAGE_REFUSED, non_retryable=True)
        if self._ctx.s.status in _ENDED:
            raise ApplicationError(
                f"the run has ended ({self._ctx.s.status}): it takes no more messages",
                type=MESSAGE_REFUSED,
                non_retryable=True,
            )

    @workflow.signal(name="raise_budget")
    def raise_budget(self, *args: Any) -> None:
        """Set new budget totals; a run paused on its budget goes on if now under it."""
        sig = self._payload(args, RaiseBudgetSignal, "raise_budget")
        if sig is None:
            return
        s = self._ctx.s
        charges.raise_limits(s, sig)
        if s.budget.budget_paused and turn.budget_exceeded(s) is None:
            control.resume(s)
            charges.pause_for_budget(s, False)

    @workflow.signal(name=CHILD_APPROVALS_SIGNAL)
    def child_approvals(self, *args: Any) -> None:
        """A child's pending approvals (:class:`workflows.children.ChildApprovals`), shown here."""
        got = decode_args(args, ChildApprovals, f"signal {CHILD_APPROVALS_SIGNAL}")
        if isinstance(got, Invalid):
            self._ctx.ignore(CHILD_APPROVALS_SIGNAL, got.principal_id, got.problem)
            return
        self._children.on_approvals(got)

    @workflow.query(name="state")
    def state(self) -> RunState:
        """The run's live state (docs/contract.md)."""
        return state.run_state(self._ctx.s, parked=self._decisions.parked_as_ignored())

    @workflow.query(name="transcript")
    def transcript(self) -> list[dict[str, Any]]:
        """The messages so far, OpenAI chat format."""
        return self._ctx.s.transcript.messages
