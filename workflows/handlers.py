"""What clients send a run (docs/contract.md), and the decisions it carries.

The signals, the ``decide`` update and the queries of ``AgentRun``.

:class:`RunHandlers` is ``AgentRun``'s one base class. Handlers take ``*args`` (any number of
payloads, each plain JSON data) and decode them with :mod:`workflows.inbound`: an invalid signal
is recorded in ``state.ignored_signals`` with why, an invalid update is refused by its validator;
nothing a client sends can fail a workflow task. Handlers only change the run state
(:class:`workflows.models.RunData`, through the run's :class:`workflows.run_context.RunContext`);
the loop in :mod:`workflows.agent_run` acts on it.

:class:`Decisions` (the run context's ``decisions``) checks, records and holds the approvals and
rejections the ``approve``/``reject`` signals and the ``decide`` update bring. Who may decide is
:func:`workflows.turn.decision_problem`; a signed decision is checked with :mod:`activities.signing`.

Held decisions (revision 3): sdk-core answers a query on a worker without the run cached by
applying events whose workflow task has not started yet (a model step's completion) at the
previous task's time; an approver who sees the request through that query may send a decision
that replay then delivers *before* the reply that asked for it (tests/histories/chaos/README.md).
From revision 3 of the workflow (``PinnedSpec.workflow_rev``), requests made in such an activation
are *unconfirmed* until an activation inside a task: ``decide`` refuses them, ``approve``/``reject``
signals for them (or for calls not known yet) are held and applied once confirmed or once the
reply that asks for them is applied in the same activation; else they are ignored, with why.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    import activities.signing as signing
    import workflows.state as state
    import workflows.turn as turn
    from workflows.children import CHILD_APPROVALS_SIGNAL, ChildApprovals, refused_by_child
    from workflows.inbound import Invalid, decode_args
    from workflows.models import (
        ApproveSignal,
        DecideResult,
        DecideUpdate,
        Decision,
        IgnoredSignal,
        InterruptSignal,
        MessageSignal,
        PrincipalSignal,
        RaiseBudgetSignal,
        RejectSignal,
        RunState,
    )

if TYPE_CHECKING:
    from workflows.children import ChildStep
    from workflows.run_context import RunContext

M = TypeVar("M", bound=BaseModel)
DECISION_REFUSED = "DecisionRefused"
"""Error type of a ``decide`` the validator refused: not retryable, the message says why."""
DECISION_NOT_YET_RECORDED = "DecisionNotYetRecorded"
"""Error type of a ``decide`` for a request made outside a workflow task: retry (client.decide does)."""


def _refused(problem: str) -> ApplicationError:
    """The validator's refusal: non-retryable, so clients (the CLI, other SDKs) do not retry it."""
    return ApplicationError(problem, type=DECISION_REFUSED, non_retryable=True)


class Decisions:
    """Checks, records and holds the decisions of one run (``ctx.s`` is the run state)."""

    def __init__(self, ctx: RunContext) -> None:
        """Belong to ``ctx``; creates no command."""
        self._ctx = ctx

    def problem(
        self, tool_call_id: str, principal_id: str, roles: Collection[str] = ()
    ) -> str | None:
        """Why a decision for this call cannot be taken now, or None (:func:`turn.decision_problem`)."""
        s = self._ctx.s
        return turn.decision_problem(
            tool_call_id,
            principal_id,
            decided={k: v.decision for k, v in s.verdicts.items()},
            waiting={k: p.approvers for k, p in s.pending.items()},
            known={r.id for r in s.tool_calls},
            policy=s.pinned.spec.policy if s.pinned else None,
            roles=roles,
        )

    def signature_problem(self, d: ApproveSignal | RejectSignal | DecideUpdate) -> str | None:
        """Why a decision's signature is not acceptable, or None (also when none is required)."""
        pinned = self._ctx.s.pinned
        policy = pinned.spec.policy if pinned else None
        if policy is None or not policy.require_signed_decisions:
            return None
        if isinstance(d, DecideUpdate):
            decision, args = d.decision, d.arguments if d.decision == "approve" else None
        else:
            decision = "approve" if isinstance(d, ApproveSignal) else "reject"
            args = d.arguments if isinstance(d, ApproveSignal) else None
        message = signing.decision_message(
            workflow.info().workflow_id,
            d.tool_call_id,
            decision,
            args,
            d.principal_id,
            d.signed_at or "",
            d.roles,
        )
        return signing.signature_problem(policy.decision_keys, message, d.signature)

    def record(
        self,
        tool_call_id: str,
        decision: Literal["approve", "reject", "timeout"],
        principal_id: str,
        arguments: dict[str, Any] | None,
        comment: str | None,
        via: Literal["signal", "update", "timer"],
    ) -> None:
        """Record a decision that was checked (or a timeout), and emit ``approval_decided``."""
        s = self._ctx.s
        d = Decision(
            tool_call_id=tool_call_id,
            decision=decision,
            principal_id=principal_id,
            at=workflow.now().isoformat(),
            arguments=arguments,
            comment=comment,
            via=via,
        )
        s.verdicts[tool_call_id] = d
        s.decisions.append(d)
        if via != "timer":
            for rec in s.tool_calls:
                if rec.id == tool_call_id:
                    rec.decided_by = principal_id
        pending = s.pending.get(tool_call_id)
        if via == "timer":
            shown = pending.arguments if pending else None
        else:
            shown = arguments if arguments is not None else (pending.arguments if pending else {})
        self._ctx.emit(
            "approval_decided",
            tool_call_id=tool_call_id,
            name=pending.name if pending else "",
            arguments=shown,
            decision=decision,
            principal_id=principal_id,
        )

    def by_signal(self, sig: ApproveSignal | RejectSignal) -> None:
        """An ``approve``/``reject`` signal: recorded, or ignored with why."""
        name = "approve" if isinstance(sig, ApproveSignal) else "reject"
        problem = self.problem(
            sig.tool_call_id, sig.principal_id, sig.roles
        ) or self.signature_problem(sig)
        if problem:
            self._ctx.ignore(name, sig.principal_id, problem, sig.tool_call_id)
        elif isinstance(sig, ApproveSignal):
            self.record(
                sig.tool_call_id, "approve", sig.principal_id, sig.arguments, sig.comment, "signal"
            )
        else:
            self.record(sig.tool_call_id, "reject", sig.principal_id, None, sig.reason, "signal")

    # ------------------------------------------------------------ held (revision 3)

    def release_held(self) -> bool:
        """Confirm requests made outside a task once time moved; apply or drop held signals.

        Called where the run waits for a person (from the wait's condition, see
        :meth:`RunContext.observe`); returns False.
        """
        ctx = self._ctx
        ctx.observe()
        s, now = ctx.s, workflow.now()
        if not ctx.outside_task:
            s.unconfirmed.clear()
        held, s.parked = s.parked, []
        for cid, sig, at in held:
            if cid in s.pending and cid not in s.unconfirmed:
                self.by_signal(sig)
            elif at == now or cid in s.unconfirmed:
                s.parked.append((cid, sig, at))
            else:
                self.by_signal(sig)  # unknown still: ignored with the reason
        return False

    def park(self, sig: ApproveSignal | RejectSignal) -> bool:
        """Hold a decision whose call is not (yet) pending in history (v3); True if held.

        The same workflow task may bring the signal and the model reply that asks for the
        approval, in either order (live vs replay): a signal for an unknown call is held until
        time moves on, one for a request made outside a workflow task until it is confirmed.
        """
        s, cid = self._ctx.s, sig.tool_call_id
        known = cid in s.verdicts or any(r.id == cid for r in s.tool_calls)
        if not self._ctx.versions.hold_early_decisions or (known and cid not in s.unconfirmed):
            return False
        s.parked.append((cid, sig, workflow.now()))
        return True

    def drop_parked(self) -> None:
        """No call waits any more: each held signal is ignored, with why."""
        s = self._ctx.s
        held, s.parked = s.parked, []
        for _, sig, _ in held:
            self.by_signal(sig)

    def held_as_ignored(self) -> list[IgnoredSignal]:
        """Held signals for unknown calls, as the ``state`` query shows them (ignored, with why)."""
        s = self._ctx.s
        return [
            IgnoredSignal(
                signal="approve" if isinstance(sig, ApproveSignal) else "reject",
                principal_id=sig.principal_id,
                at=at.isoformat(),
                reason=self.problem(cid, sig.principal_id) or "held",
                tool_call_id=cid,
            )
            for cid, sig, at in s.parked
            if cid not in s.unconfirmed
        ]


class RunHandlers:
    """The message handlers of ``AgentRun`` (its one base class).

    They decode what a client sent and change the run state through the run's context
    (``self._ctx``); decisions go to ``self._ctx.decisions``, those for a child run's call to
    ``self._children`` (forwarding is the only command a handler creates: a signal to the child).
    """

    _ctx: RunContext
    _children: ChildStep

    def _payload(self, args: tuple[Any, ...], model: type[M], signal: str) -> M | None:
        """Decode a signal's payload; an invalid one is recorded as ignored (returns None)."""
        got = decode_args(args, model, f"signal {signal}")
        if isinstance(got, Invalid):
            self._ctx.ignore(signal, got.principal_id, got.problem, got.tool_call_id)
            return None
        return got

    def _on_decision(self, sig: ApproveSignal | RejectSignal) -> None:
        """An approve/reject signal: forwarded to a child, held (revision 3), or taken."""
        decisions = self._ctx.decisions
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
        self._ctx.decisions.record(
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
        s, decisions = self._ctx.s, self._ctx.decisions
        if self._children.child_of_call(upd.tool_call_id) is not None:
            # a child's call: forwarded, and the child checks who decides (roles included)
            problem = refused_by_child(s.child_pending, upd.tool_call_id, upd.principal_id)
            if problem:
                raise _refused(problem)
            return
        if upd.tool_call_id in s.unconfirmed:
            raise ApplicationError(
                f"tool call {upd.tool_call_id} is not recorded in the run's history yet; retry",
                type=DECISION_NOT_YET_RECORDED,
            )
        problem = decisions.problem(
            upd.tool_call_id, upd.principal_id, upd.roles
        ) or decisions.signature_problem(upd)
        if problem:
            raise _refused(problem)

    @workflow.signal(name="interrupt")
    def interrupt(self, *args: Any) -> None:
        """Stop at the next safe point; in-flight activities are cancelled: :class:`InterruptSignal`."""
        sig = self._payload(args, InterruptSignal, "interrupt")
        if sig is None:
            return
        if self._ctx.s.interrupt is None:
            self._ctx.s.interrupt = sig
        else:
            self._ctx.ignore("interrupt", sig.principal_id, "already interrupted")

    @workflow.signal(name="pause")
    def pause(self, *args: Any) -> None:
        """Hold the run before its next step: :class:`PrincipalSignal`."""
        sig = self._payload(args, PrincipalSignal, "pause")
        if sig is None:
            return
        if self._ctx.s.paused:
            self._ctx.ignore("pause", sig.principal_id, "already paused")
        self._ctx.s.paused = True

    @workflow.signal(name="resume")
    def resume(self, *args: Any) -> None:
        """Let a paused run go on: :class:`PrincipalSignal`."""
        sig = self._payload(args, PrincipalSignal, "resume")
        if sig is None:
            return
        s = self._ctx.s
        if not s.paused:
            self._ctx.ignore("resume", sig.principal_id, "not paused")
        elif s.budget_paused and turn.budget_exceeded(s) is not None:
            self._ctx.ignore("resume", sig.principal_id, "over budget: raise it with raise_budget")
            return
        s.paused = False
        s.budget_paused = False

    @workflow.signal(name="send_message")
    def send_message(self, *args: Any) -> None:
        """Add a user message (steering, or a conversation's next turn): :class:`MessageSignal`."""
        sig = self._payload(args, MessageSignal, "send_message")
        if sig is not None:
            self._ctx.s.inbox.append(sig)

    @workflow.signal(name="raise_budget")
    def raise_budget(self, *args: Any) -> None:
        """Set new budget totals; a run paused on its budget goes on if now under it."""
        sig = self._payload(args, RaiseBudgetSignal, "raise_budget")
        if sig is None:
            return
        s = self._ctx.s
        if sig.max_total_tokens is not None:
            s.max_total_tokens = sig.max_total_tokens
        if sig.max_cost_usd is not None:
            s.max_cost_usd = sig.max_cost_usd
        if sig.max_sandbox_seconds is not None:
            s.max_sandbox_seconds = sig.max_sandbox_seconds
        if s.budget_paused and turn.budget_exceeded(s) is None:
            s.paused = False
            s.budget_paused = False

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
        return state.run_state(self._ctx.s, held=self._ctx.decisions.held_as_ignored())

    @workflow.query(name="transcript")
    def transcript(self) -> list[dict[str, Any]]:
        """The messages so far, OpenAI chat format."""
        return self._ctx.s.messages
