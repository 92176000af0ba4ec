"""What clients send a run (docs/contract.md), and the decisions it carries.

The signals, the ``decide`` update and the queries of ``AgentRun``.

:class:`RunHandlers` is ``AgentRun``'s one base class. Handlers take ``*args`` (any number of
payloads, each plain JSON data) and decode them with :mod:`workflows.inbound`: an invalid signal
is recorded in ``state.ignored_signals`` with why, an invalid update is refused by its validator;
nothing a client sends can fail a workflow task. Handlers only change the run state
(:class:`workflows.models.RunData`, through the run's :class:`workflows.run_context.RunContext`);
the loop in :mod:`workflows.agent_run` acts on it.

Decisions are checked, recorded and parked by :class:`workflows.approvals.Decisions`; the handlers
here only decode what clients send and hand it over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, get_args

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    import workflows.charges as charges
    import workflows.control as control
    import workflows.guardrails as guardrails
    import workflows.state as state
    import workflows.turn as turn
    from workflows.child_rules import CHILD_APPROVALS_SIGNAL, ChildApprovals, refused_by_child
    from workflows.inbound import Invalid, decode_args
    from workflows.models import (
        AddMessageResult,
        AddMessageUpdate,
        ApproveSignal,
        DecideResult,
        DecideUpdate,
        InterruptSignal,
        MessageSignal,
        PrincipalSignal,
        RaiseBudgetSignal,
        RejectSignal,
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

M = TypeVar("M", bound=BaseModel)
MESSAGE_REFUSED = "MessageRefused"
"""Error type of an ``add_message`` the validator refused: not retryable, the message says why."""
TOOL_RESULT_REFUSED = "ToolResultRefused"
"""Error type of a ``tool_result`` the validator refused: not retryable, the message says why."""


_ENDED = frozenset(get_args(RunStatus))
"""The statuses of a run that has ended (``add_message`` refuses them)."""


def _refused(problem: str) -> ApplicationError:
    """The validator's refusal: non-retryable, so clients (the CLI, other SDKs) do not retry it."""
    return ApplicationError(problem, type=DECISION_REFUSED, non_retryable=True)


class RunHandlers:
    """The message handlers of ``AgentRun`` (its one base class).

    They decode what a client sent and change the run state through the run's context
    (``self._ctx``); decisions go to ``self._decisions`` (workflows/approvals.py), those for a
    child run's call to ``self._children`` (forwarding is the only command a handler creates: a
    signal to the child).
    """

    _ctx: RunContext
    _children: ChildStep
    _decisions: Decisions
    _client: ClientTools

    def _payload(self, args: tuple[Any, ...], model: type[M], signal: str) -> M | None:
        """Decode a signal's payload; an invalid one is recorded as ignored (returns None)."""
        got = decode_args(args, model, f"signal {signal}")
        if isinstance(got, Invalid):
            self._ctx.ignore(signal, got.principal_id, got.problem, got.tool_call_id)
            return None
        return got

    def _on_decision(self, sig: ApproveSignal | RejectSignal) -> None:
        """An approve/reject signal: forwarded to a child, parked (revision 3), or taken."""
        decisions = self._decisions
        if (child := self._children.child_of_call(sig.tool_call_id)) is not None:
            self._children.forward_decision(sig, child)
        elif not decisions.park(sig):
            decisions.by_signal(sig)

    @workflow.signal(name="approve")
    def approve(self, *args: Any) -> None:
        """Approve a waiting tool call (optionally with edited arguments): :class:`ApproveSignal`."""
        sig = self._payload(args, ApproveSignal, "approve")
        if sig is not None:
            self._on_decision(sig)

    @workflow.signal(name="reject")
    def reject(self, *args: Any) -> None:
        """Reject a waiting tool call; the model is told why: :class:`RejectSignal`."""
        sig = self._payload(args, RejectSignal, "reject")
        if sig is not None:
            self._on_decision(sig)

    @workflow.update(name="decide")
    def decide(self, *args: Any) -> DecideResult:
        """Approve or reject a waiting tool call, synchronously: :class:`DecideUpdate`."""
        upd = decode_args(args, DecideUpdate, "update decide")
        if isinstance(upd, Invalid):  # refused by the validator before it gets here
            raise ApplicationError(upd.problem, type="InvalidPayload", non_retryable=True)
        child = self._children.child_of_call(upd.tool_call_id)
        if child is not None:
            self._children.forward_decision(upd, child)
            return DecideResult(tool_call_id=upd.tool_call_id, decision=upd.decision)
        self._decisions.record(
            upd.tool_call_id,
            upd.decision,
            upd.principal_id,
            upd.arguments if upd.decision == "approve" else None,
            upd.comment if upd.decision == "approve" else (upd.reason or upd.comment),
            "update",
        )
        return DecideResult(tool_call_id=upd.tool_call_id, decision=upd.decision)

    @decide.validator
    def _validate_decide(self, *args: Any) -> None:
        upd = decode_args(args, DecideUpdate, "update decide")
        if isinstance(upd, Invalid):
            raise _refused(upd.problem)
        s, decisions = self._ctx.s, self._decisions
        if (why := decisions.judge_name_problem(upd.principal_id)) is not None:
            raise _refused(why)
        if self._children.child_of_call(upd.tool_call_id) is not None:
            # a child's call: forwarded, and the child checks who decides (roles included)
            problem = refused_by_child(
                s.delegation.child_pending, upd.tool_call_id, upd.principal_id
            )
            if problem:
                raise _refused(problem)
            return
        if upd.tool_call_id in s.approvals.unconfirmed:
            raise ApplicationError(
                f"tool call {upd.tool_call_id} is not recorded in the run's history yet; retry",
                type=DECISION_NOT_YET_RECORDED,
            )
        problem = decisions.problem(
            upd.tool_call_id, upd.principal_id, upd.roles
        ) or decisions.signature_problem(upd)
        if problem:
            raise _refused(problem)

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
