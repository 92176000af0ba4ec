"""Signals, the ``decide`` update and the queries of ``AgentRun`` (docs/contract.md), as a mixin.

Handlers take ``*args`` (any number of payloads, each plain JSON data) and decode them with
:mod:`workflows.inbound`: an invalid signal is recorded in ``state.ignored_signals`` with why, an
invalid update is refused by its validator; nothing a client sends can fail a workflow task.
Handlers only change the run state (:class:`workflows.models.RunData`); the loop in
:mod:`workflows.agent_run` acts on it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    import activities.signing as signing
    import workflows.state as state
    import workflows.turn as turn
    from workflows.children import refused_by_child
    from workflows.held import HeldDecisions
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
        RunData,
        RunState,
    )

M = TypeVar("M", bound=BaseModel)
DECISION_REFUSED = "DecisionRefused"
"""Error type of a ``decide`` the validator refused: not retryable, the message says why."""


def _refused(problem: str) -> ApplicationError:
    """The validator's refusal: non-retryable, so clients (the CLI, other SDKs) do not retry it."""
    return ApplicationError(problem, type=DECISION_REFUSED, non_retryable=True)


class RunHandlers(HeldDecisions):
    """The message handlers of ``AgentRun``; ``self._s`` is the run state."""

    _s: RunData
    _child_of_call: Callable[[str], str | None]
    _forward_decision: Callable[..., None]

    def _emit(self, type: str, **fields: Any) -> None:
        """Publish one event of the run's stream (docs/contract.md, "Event stream"); a no-op here.

        Must never create a command: it is called from handlers and between commands.
        """

    def _ignore(
        self, signal: str, principal_id: str, reason: str, tool_call_id: str | None = None
    ) -> None:
        self._s.ignored_signals.append(
            IgnoredSignal(
                signal=signal,
                principal_id=principal_id,
                at=workflow.now().isoformat(),
                reason=reason,
                tool_call_id=tool_call_id,
            )
        )
        workflow.logger.info("signal ignored", extra={"signal": signal, "why": reason})

    def _payload(self, args: tuple[Any, ...], model: type[M], signal: str) -> M | None:
        """Decode a signal's payload; an invalid one is recorded as ignored (returns None)."""
        got = decode_args(args, model, f"signal {signal}")
        if isinstance(got, Invalid):
            self._ignore(signal, got.principal_id, got.problem, got.tool_call_id)
            return None
        return got

    def _decision_problem(
        self, tool_call_id: str, principal_id: str, roles: Collection[str] = ()
    ) -> str | None:
        """Why a decision for this call cannot be taken now, or None (:func:`turn.decision_problem`)."""
        s = self._s
        return turn.decision_problem(
            tool_call_id,
            principal_id,
            decided={k: v.decision for k, v in s.verdicts.items()},
            waiting={k: p.approvers for k, p in s.pending.items()},
            known={r.id for r in s.tool_calls},
            policy=s.pinned.spec.policy if s.pinned else None,
            roles=roles,
        )

    def _signature_problem(self, d: ApproveSignal | RejectSignal | DecideUpdate) -> str | None:
        """Why a decision's signature is not acceptable, or None (also when none is required)."""
        policy = self._s.pinned.spec.policy if self._s.pinned else None
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

    def _record(
        self,
        tool_call_id: str,
        decision: str,
        principal_id: str,
        arguments: dict[str, Any] | None,
        comment: str | None,
        via: str,
    ) -> None:
        d = Decision(
            tool_call_id=tool_call_id,
            decision=decision,  # type: ignore[arg-type]
            principal_id=principal_id,
            at=workflow.now().isoformat(),
            arguments=arguments,
            comment=comment,
            via=via,  # type: ignore[arg-type]
        )
        self._s.verdicts[tool_call_id] = d
        self._s.decisions.append(d)
        for rec in self._s.tool_calls:
            if rec.id == tool_call_id:
                rec.decided_by = principal_id
        pending = self._s.pending.get(tool_call_id)
        self._emit(
            "approval_decided",
            tool_call_id=tool_call_id,
            name=pending.name if pending else "",
            arguments=arguments
            if arguments is not None
            else (pending.arguments if pending else {}),
            decision=decision,
            principal_id=principal_id,
        )

    @workflow.signal(name="approve")
    def approve(self, *args: Any) -> None:
        """Approve a waiting tool call (optionally with edited arguments): :class:`ApproveSignal`."""
        sig = self._payload(args, ApproveSignal, "approve")
        if sig is not None and (child := self._child_of_call(sig.tool_call_id)) is not None:
            self._forward_decision(sig, child)
        elif sig is not None and not self._park(sig):
            self._signal_decision(sig)

    @workflow.signal(name="reject")
    def reject(self, *args: Any) -> None:
        """Reject a waiting tool call; the model is told why: :class:`RejectSignal`."""
        sig = self._payload(args, RejectSignal, "reject")
        if sig is not None and (child := self._child_of_call(sig.tool_call_id)) is not None:
            self._forward_decision(sig, child)
        elif sig is not None and not self._park(sig):
            self._signal_decision(sig)

    def _signal_decision(self, sig: ApproveSignal | RejectSignal) -> None:
        name = "approve" if isinstance(sig, ApproveSignal) else "reject"
        problem = self._decision_problem(
            sig.tool_call_id, sig.principal_id, sig.roles
        ) or self._signature_problem(sig)
        if problem:
            self._ignore(name, sig.principal_id, problem, sig.tool_call_id)
        elif isinstance(sig, ApproveSignal):
            self._record(
                sig.tool_call_id, "approve", sig.principal_id, sig.arguments, sig.comment, "signal"
            )
        else:
            self._record(sig.tool_call_id, "reject", sig.principal_id, None, sig.reason, "signal")

    @workflow.update(name="decide")
    def decide(self, *args: Any) -> DecideResult:
        """Approve or reject a waiting tool call, synchronously: :class:`DecideUpdate`."""
        upd = decode_args(args, DecideUpdate, "update decide")
        if isinstance(upd, Invalid):  # refused by the validator before it gets here
            raise ApplicationError(upd.problem, type="InvalidPayload", non_retryable=True)
        child = self._child_of_call(upd.tool_call_id)
        if child is not None:
            self._forward_decision(upd, child)
            return DecideResult(tool_call_id=upd.tool_call_id, decision=upd.decision)
        self._record(
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
        if self._child_of_call(upd.tool_call_id) is not None:
            # a child's call: forwarded, and the child checks who decides (roles included)
            problem = refused_by_child(self._s.child_pending, upd.tool_call_id, upd.principal_id)
            if problem:
                raise _refused(problem)
            return
        if upd.tool_call_id in self._s.unconfirmed:
            raise ApplicationError(
                f"tool call {upd.tool_call_id} is not recorded in the run's history yet; retry",
                type="DecisionNotYetRecorded",
            )
        problem = self._decision_problem(
            upd.tool_call_id, upd.principal_id, upd.roles
        ) or self._signature_problem(upd)
        if problem:
            raise _refused(problem)

    @workflow.signal(name="interrupt")
    def interrupt(self, *args: Any) -> None:
        """Stop at the next safe point; in-flight activities are cancelled: :class:`InterruptSignal`."""
        sig = self._payload(args, InterruptSignal, "interrupt")
        if sig is None:
            return
        if self._s.interrupt is None:
            self._s.interrupt = sig
        else:
            self._ignore("interrupt", sig.principal_id, "already interrupted")

    @workflow.signal(name="pause")
    def pause(self, *args: Any) -> None:
        """Hold the run before its next step: :class:`PrincipalSignal`."""
        sig = self._payload(args, PrincipalSignal, "pause")
        if sig is None:
            return
        if self._s.paused:
            self._ignore("pause", sig.principal_id, "already paused")
        self._s.paused = True

    @workflow.signal(name="resume")
    def resume(self, *args: Any) -> None:
        """Let a paused run go on: :class:`PrincipalSignal`."""
        sig = self._payload(args, PrincipalSignal, "resume")
        if sig is None:
            return
        s = self._s
        if not s.paused:
            self._ignore("resume", sig.principal_id, "not paused")
        elif s.budget_paused and turn.budget_exceeded(s) is not None:
            self._ignore("resume", sig.principal_id, "over budget: raise it with raise_budget")
            return
        s.paused = False
        s.budget_paused = False

    @workflow.signal(name="send_message")
    def send_message(self, *args: Any) -> None:
        """Add a user message (steering, or a conversation's next turn): :class:`MessageSignal`."""
        sig = self._payload(args, MessageSignal, "send_message")
        if sig is not None:
            self._s.inbox.append(sig)

    @workflow.signal(name="raise_budget")
    def raise_budget(self, *args: Any) -> None:
        """Set new budget totals; a run paused on its budget goes on if now under it."""
        sig = self._payload(args, RaiseBudgetSignal, "raise_budget")
        if sig is None:
            return
        s = self._s
        if sig.max_total_tokens is not None:
            s.max_total_tokens = sig.max_total_tokens
        if sig.max_cost_usd is not None:
            s.max_cost_usd = sig.max_cost_usd
        if sig.max_sandbox_seconds is not None:
            s.max_sandbox_seconds = sig.max_sandbox_seconds
        if s.budget_paused and turn.budget_exceeded(s) is None:
            s.paused = False
            s.budget_paused = False

    @workflow.query(name="state")
    def state(self) -> RunState:
        """The run's live state (docs/contract.md)."""
        return state.run_state(self._s, held=self._held_as_ignored())

    @workflow.query(name="transcript")
    def transcript(self) -> list[dict[str, Any]]:
        """The messages so far, OpenAI chat format."""
        return self._s.messages
