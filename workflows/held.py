"""Decisions that arrive before their approval request is in history (revision 3), as a mixin.

sdk-core answers a query on a worker without the run cached by applying events whose workflow
task has not started yet (a model step's completion) at the previous task's time; an approver who
sees the request through that query may send a decision that replay then delivers *before* the
reply that asked for it (tests/histories/chaos/README.md). From revision 3 of the workflow
(``PinnedSpec.workflow_rev``), requests made in such an activation are *unconfirmed* until an
activation inside a task: ``decide`` refuses them, ``approve``/``reject`` signals for them (or for
calls not known yet) are held and applied once confirmed or once the reply that asks for them is
applied in the same activation; else they are ignored, with why.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.models import ApproveSignal, IgnoredSignal, RejectSignal, RunData

WORKFLOW_REV = 4
"""Revision of this code's behaviour, recorded in each run's history: ``spec.resolve`` echoes it
into ``PinnedSpec.workflow_rev`` (0 in runs recorded before; they replay the revision-2 branches).
Revision 3 takes no decision that changes commands from a ``workflow.now()`` difference, and
refuses decisions for approval requests not yet in history. Revision 4 (with patch
``agent-run-v4``: ``spec.resolve`` as a local activity) runs tools marked ``local`` as local
activities and upserts search attributes only when what they show changed (docs/throughput.md)."""


class HeldDecisions:
    """Observes activations and holds early decisions; ``self._s`` is the run state."""

    _s: RunData
    _seen: tuple[datetime, int] | None
    _outside_task: bool
    _decision_problem: Callable[[str, str], str | None]
    _signal_decision: Callable[[ApproveSignal | RejectSignal], None]

    def _rev3(self) -> bool:
        """Whether the run started with revision 3 (a value in its history, not a marker)."""
        pinned = self._s.pinned
        return pinned is not None and pinned.workflow_rev >= 3

    def _rev4(self) -> bool:
        """Whether the run started with revision 4 (local tools, fewer upserts)."""
        pinned = self._s.pinned
        return pinned is not None and pinned.workflow_rev >= 4

    def _observe(self) -> bool:
        """Note whether this activation runs outside a workflow task; returns False.

        Called from wait conditions (evaluated in every activation). Each workflow task has a
        later time than the one before; an activation sdk-core makes to answer a query on a
        worker without the run cached, applying events whose task has not started, keeps the
        last task's time with a longer history. Only what is not a command depends on it.
        """
        seen = (workflow.now(), workflow.info().get_current_history_length())
        if self._seen is None or seen[0] != self._seen[0]:
            self._outside_task = False
        elif seen[1] != self._seen[1]:
            self._outside_task = True
        self._seen = seen
        return False

    def _settle(self) -> bool:
        """Confirm requests made outside a task once time moved; apply or drop held signals.

        Called where the run waits for a person (from the wait's condition); returns False.
        """
        self._observe()
        s, now = self._s, workflow.now()
        if not self._outside_task:
            s.unconfirmed.clear()
        held, s.parked = s.parked, []
        for cid, sig, at in held:
            if cid in s.pending and cid not in s.unconfirmed:
                self._signal_decision(sig)
            elif at == now or cid in s.unconfirmed:
                s.parked.append((cid, sig, at))
            else:
                self._signal_decision(sig)  # unknown still: ignored with the reason
        return False

    def _park(self, sig: ApproveSignal | RejectSignal) -> bool:
        """Hold a decision whose call is not (yet) pending in history (v3); True if held.

        The same workflow task may bring the signal and the model reply that asks for the
        approval, in either order (live vs replay): a signal for an unknown call is held until
        time moves on, one for a request made outside a workflow task until it is confirmed.
        """
        s, cid = self._s, sig.tool_call_id
        known = cid in s.verdicts or any(r.id == cid for r in s.tool_calls)
        if not self._rev3() or (known and cid not in s.unconfirmed):
            return False
        s.parked.append((cid, sig, workflow.now()))
        return True

    def _drop_parked(self) -> None:
        """No call waits any more: each held signal is ignored, with why."""
        held, self._s.parked = self._s.parked, []
        for _, sig, _ in held:
            self._signal_decision(sig)

    def _held_as_ignored(self) -> list[IgnoredSignal]:
        """Held signals for unknown calls, as the ``state`` query shows them (ignored, with why)."""
        return [
            IgnoredSignal(
                signal="approve" if isinstance(sig, ApproveSignal) else "reject",
                principal_id=sig.principal_id,
                at=at.isoformat(),
                reason=self._decision_problem(cid, sig.principal_id) or "held",
                tool_call_id=cid,
            )
            for cid, sig, at in self._s.parked
            if cid not in self._s.unconfirmed
        ]
