"""Approvals of one run: decisions clients send, who may decide, what is recorded, what parked.

:class:`DecisionHandlers` holds ``AgentRun``'s ``approve``/``reject`` signals and its ``decide``
update (``agentctl approve``, ``workers.client.decide``): they decode what the client sent
(:mod:`workflows.inbound`), send a child run's call's decision on to the child
(:mod:`workflows.children`) and hand the rest to :class:`Decisions`.

Owner of the run state's ``approvals`` part (:class:`workflows.run_parts.Approvals`): the calls
waiting (:func:`ask`, :func:`answered`, :func:`drop_pending`, :func:`unconfirmed`), the verdicts
and decisions, and the parked signals change here only.

:class:`Decisions` checks, records and holds the approvals and rejections that the
``approve``/``reject`` signals and the ``decide`` update bring. Who may decide is
:func:`workflows.turn.decision_problem`; a signed decision is checked with :mod:`activities.signing`.

Parked decisions (revision 3): sdk-core answers a query on a worker without the run cached by
applying events whose workflow task has not started yet (a model step's completion) at the
previous task's time; an approver who sees the request through that query may send a decision
that replay then delivers *before* the reply that asked for it (tests/histories/chaos/README.md).
From revision 3 of the workflow (``PinnedSpec.workflow_rev``), requests made in such an activation
are *unconfirmed* until an activation inside a task: ``decide`` refuses them, ``approve``/``reject``
signals for them (or for calls not known yet) are parked and applied once confirmed or once the
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
    import workflows.turn as turn
    from activities.judge import JudgeVerdict
    from activities.spec import JUDGE_PREFIX
    from workflows.child_rules import refused_by_child
    from workflows.inbound import Invalid, decode_args
    from workflows.models import (
        ApproveSignal,
        DecideResult,
        DecideUpdate,
        Decision,
        IgnoredSignal,
        RejectSignal,
    )
    from workflows.signals import DECISION_NOT_YET_RECORDED, DECISION_REFUSED

if TYPE_CHECKING:
    from workflows.children import ChildStep
    from workflows.models import PendingApproval, RunData
    from workflows.run_context import RunContext

M = TypeVar("M", bound=BaseModel)


# The run state's ``approvals`` part (workflows/run_parts.py) is changed here only: the functions
# below for the calls asked for, :class:`Decisions` for the decisions.


def ask(s: RunData, pending: PendingApproval) -> None:
    """A call waits for a person's decision (``state.pending_approvals``)."""
    s.approvals.pending[pending.tool_call_id] = pending


def unconfirmed(s: RunData, tool_call_id: str) -> None:
    """A request made outside a workflow task (v3): unconfirmed until a task (module docstring)."""
    s.approvals.unconfirmed.add(tool_call_id)


def answered(s: RunData, tool_call_id: str) -> None:
    """The call no longer waits (its verdict is in, or the judge decided it)."""
    s.approvals.pending.pop(tool_call_id, None)


def drop_pending(s: RunData) -> None:
    """No call waits any more (the approval timed out and fails the run, or the run ended)."""
    s.approvals.pending.clear()


class Decisions:
    """Checks, records and holds the decisions of one run (``ctx.s`` is the run state)."""

    def __init__(self, ctx: RunContext) -> None:
        """Belong to ``ctx``; no command here (``AgentRun`` hands :meth:`release_parked` to it)."""
        self._ctx = ctx

    def problem(
        self, tool_call_id: str, principal_id: str, roles: Collection[str] = ()
    ) -> str | None:
        """Why a decision for this call cannot be taken now, or None (:func:`turn.decision_problem`).

        In a run with a judge no client may decide in its name (a principal ``judge:...``).
        """
        s = self._ctx.s
        if (why := self.judge_name_problem(principal_id)) is not None:
            return why
        return turn.decision_problem(
            tool_call_id,
            principal_id,
            decided={k: v.decision for k, v in s.approvals.verdicts.items()},
            waiting={k: p.approvers for k, p in s.approvals.pending.items()},
            known={r.id for r in s.tool_calls},
            policy=s.pinned.spec.policy if s.pinned else None,
            roles=roles,
        )

    def judge_name_problem(self, principal_id: str) -> str | None:
        """Why a client may not send a decision as ``principal_id``: the judge's names are the run's."""
        if self._ctx.versions.refuse_judge_names and principal_id.startswith(JUDGE_PREFIX):
            return (
                f"principal {principal_id!r}: names starting with {JUDGE_PREFIX!r} are the "
                "run's judge; no client may decide in its name"
            )
        return None

    def by_judge(self, tool_call_id: str, model: str, verdict: JudgeVerdict) -> bool:
        """The judge's verdict on a waiting call: a decision of principal ``judge:<model>``.

        ``approve`` and ``reject`` are recorded like a person's (``via`` judge, the reason as its
        comment) unless a person decided first; ``escalate`` leaves the call waiting for a person
        (the reason shown on the pending approval, event ``approval_escalated``). Returns whether
        the verdict decided the call.
        """
        s, who = self._ctx.s, f"{JUDGE_PREFIX}{model}"
        pending = s.approvals.pending.get(tool_call_id)
        if pending is None or tool_call_id in s.approvals.verdicts:
            return False
        if verdict.verdict == "escalate":
            pending.escalated = verdict.reason
            self._ctx.emit(
                "approval_escalated",
                tool_call_id=tool_call_id,
                name=pending.name,
                principal_id=who,
                reason=verdict.reason,
            )
            return False
        self.record(tool_call_id, verdict.verdict, who, None, verdict.reason, "judge")
        return True

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
        via: Literal["signal", "update", "timer", "judge"],
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
        s.approvals.verdicts[tool_call_id] = d
        s.approvals.decisions.append(d)
        if via != "timer":
            for rec in s.tool_calls:
                if rec.id == tool_call_id:
                    rec.decided_by = principal_id
        pending = s.approvals.pending.get(tool_call_id)
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
            **({"via": via, "reason": comment} if via == "judge" else {}),
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

    # ------------------------------------------------------------ parked (revision 3)

    def release_parked(self) -> bool:
        """Confirm requests made outside a task once time moved; apply or drop parked signals.

        Called where the run waits for a person (from the wait's condition, see
        :meth:`RunContext.observe`); returns False.
        """
        ctx = self._ctx
        ctx.observe()
        s, now = ctx.s, workflow.now()
        if not ctx.outside_task:
            s.approvals.unconfirmed.clear()
        parked, s.approvals.parked = s.approvals.parked, []
        for cid, sig, at in parked:
            if cid in s.approvals.pending and cid not in s.approvals.unconfirmed:
                self.by_signal(sig)
            elif at == now or cid in s.approvals.unconfirmed:
                s.approvals.parked.append((cid, sig, at))
            else:
                self.by_signal(sig)  # unknown still: ignored with the reason
        return False

    def park(self, sig: ApproveSignal | RejectSignal) -> bool:
        """Park a decision whose call is not (yet) pending in history (v3); True if parked.

        The same workflow task may bring the signal and the model reply that asks for the
        approval, in either order (live vs replay): a signal for an unknown call is parked until
        time moves on, one for a request made outside a workflow task until it is confirmed.
        """
        s, cid = self._ctx.s, sig.tool_call_id
        known = cid in s.approvals.verdicts or any(r.id == cid for r in s.tool_calls)
        if not self._ctx.versions.park_early_decisions or (
            known and cid not in s.approvals.unconfirmed
        ):
            return False
        s.approvals.parked.append((cid, sig, workflow.now()))
        return True

    def drop_parked(self) -> None:
        """No call waits any more: each parked signal is ignored, with why."""
        s = self._ctx.s
        parked, s.approvals.parked = s.approvals.parked, []
        for _, sig, _ in parked:
            self.by_signal(sig)

    def parked_as_ignored(self) -> list[IgnoredSignal]:
        """Held signals for unknown calls, as the ``state`` query shows them (ignored, with why)."""
        s = self._ctx.s
        return [
            IgnoredSignal(
                signal="approve" if isinstance(sig, ApproveSignal) else "reject",
                principal_id=sig.principal_id,
                at=at.isoformat(),
                reason=self.problem(cid, sig.principal_id) or "parked",
                tool_call_id=cid,
            )
            for cid, sig, at in s.approvals.parked
            if cid not in s.approvals.unconfirmed
        ]


def _refused(problem: str) -> ApplicationError:
    """The validator's refusal: non-retryable, so clients (the CLI, other SDKs) do not retry it."""
    return ApplicationError(problem, type=DECISION_REFUSED, non_retryable=True)


class DecisionHandlers:
    """The decisions' handlers of ``AgentRun``: signals ``approve``/``reject``, update ``decide``.

    :class:`workflows.handlers.RunHandlers`, ``AgentRun``'s one base class, extends this class.
    Handlers take ``*args`` (any number of payloads, each plain JSON data): an invalid signal is
    recorded in ``state.ignored_signals`` with why, an invalid ``decide`` is refused by its
    validator (error type ``DecisionRefused``, or ``DecisionNotYetRecorded`` for a call not in
    history yet: retry); nothing a client sends can fail a workflow task.
    """

    _ctx: RunContext
    _children: ChildStep
    _decisions: Decisions

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
