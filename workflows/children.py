"""Sub-agents as child runs: ``ask_<NAME>`` starts a child ``AgentRun`` and returns its answer.

Owner of the run state's ``delegation`` part (:class:`workflows.run_parts.Delegation`).

The pure half (ids, requests, budgets, what the model is told, the approvals a child reports)
is plain functions, tested without a server; :class:`ChildStep` starts the child workflow and waits
for it, on the run's :class:`workflows.run_context.RunContext`.

* The child's workflow id is ``<parent id>.<NAME>-<n>`` (``n`` counts this parent's children of
  that agent, carried through continue-as-new). Temporal sets its system search attributes
  ``ParentWorkflowId`` (the parent's workflow id) and ``ParentRunId`` (the parent's run id); a
  run may not set them itself. It inherits the parent's tenant, principal and spec file, and
  resolves and pins its own spec when it starts.
* Budget: each child gets an even share of what is left of the parent's token and cost budget
  (among the children started in the same turn) as its own limits, so a child that would exceed
  it stops ``budget_exceeded``; its usage is added to the parent's when it ends.
* Interrupt or cancel of the parent: the child gets the ``interrupt`` signal, the parent waits
  for its result (its partial usage counts), and the parent close policy ``REQUEST_CANCEL``
  covers a parent that is terminated.
* Approvals: a child that waits for a person signals its pending approvals to its parent
  (:data:`CHILD_APPROVALS_SIGNAL`); they show in the parent's ``state.pending_approvals`` with
  ``run_id`` set, and a decision sent to the parent for one of them is forwarded to the child.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    import workflows.charges as charges
    import workflows.render as render
    import workflows.turn as turn
    from activities.contracts import ToolCallRequest, ToolInfo
    from workflows.child_rules import (
        CHILD_APPROVALS_SIGNAL,
        ChildApprovals,
        child_answer,
        child_holding,
        child_limits,
        child_request,
        child_workflow_id,
        shown_status,
        task_of,
    )
    from workflows.models import (
        ApproveSignal,
        ChildRecord,
        DecideUpdate,
        LiveStatus,
        RejectSignal,
        RunRequest,
        RunResult,
        RunStatus,
        ToolCallRecord,
    )

if TYPE_CHECKING:
    from workflows.models import RunData
    from workflows.run_context import RunContext


# The run state's ``delegation`` part (workflows/run_parts.py: children, the calls they wait on,
# lineage, the handoff of the turn) is changed in this module only: by :class:`ChildStep` and
# by the functions below, which the handoff step and the run's end call.


def note_handoff(s: RunData, agent: str) -> None:
    """A ``handoff_to_<agent>`` call this turn: the run goes on with ``agent`` at its end."""
    s.delegation.handoff_to = agent


def take_handoff(s: RunData) -> str | None:
    """The agent this turn hands the run to (None: no handoff), cleared for the next turn."""
    agent, s.delegation.handoff_to = s.delegation.handoff_to, None
    return agent


def handed_over(s: RunData, old: str, agent: str) -> None:
    """Lineage (``RunResult.lineage``): the first agent ``old`` if none yet, then ``agent``."""
    if not s.delegation.lineage:
        s.delegation.lineage.append(old)
    s.delegation.lineage.append(agent)


def run_ended(s: RunData) -> None:
    """The run ends: children still running are shown ``cancelled``; no child call waits."""
    for child in s.delegation.children:
        if child.status == "running":
            child.status = "cancelled"
    s.delegation.child_pending.clear()


class ChildStep:
    """Starts ``ask_*`` children, waits for them, and relays their approvals."""

    def __init__(self, ctx: RunContext) -> None:
        """Work on ``ctx``; creates no command."""
        self.ctx = ctx

    # ---- approvals of children

    def report_approvals(self) -> None:
        """A child run tells its parent the calls it waits on now (no-op for a top-level run)."""
        info = workflow.info()
        if info.parent is None:
            return
        payload = ChildApprovals(
            run_id=info.workflow_id, pending=list(self.ctx.s.approvals.pending.values())
        )
        handle = workflow.get_external_workflow_handle(info.parent.workflow_id)
        asyncio.ensure_future(_quietly(handle.signal(CHILD_APPROVALS_SIGNAL, payload)))

    def on_approvals(self, got: ChildApprovals) -> None:
        """A child's pending approvals arrived (signal ``child_approvals``): shown in this run."""
        s = self.ctx.s
        if not any(c.run_id == got.run_id and c.status == "running" for c in s.delegation.children):
            self.ctx.ignore(CHILD_APPROVALS_SIGNAL, "system", f"{got.run_id} is no running child")
            return
        before = shown_status(s)
        if got.pending:
            s.delegation.child_pending[got.run_id] = got.pending
        else:
            s.delegation.child_pending.pop(got.run_id, None)
        self._shown_status_changed(before)
        self.ctx.publish()

    def _shown_status_changed(self, before: LiveStatus | RunStatus) -> None:
        """Upsert ``AgentStatus`` when a child's approvals changed the status people see."""
        if shown_status(self.ctx.s) != before and self.ctx.versions.upsert_shown_status():
            self.ctx.upsert_search_attributes()

    def child_of_call(self, tool_call_id: str) -> str | None:
        """The child run waiting on ``tool_call_id`` (None: not a child's call)."""
        return child_holding(self.ctx.s.delegation.child_pending, tool_call_id)

    def forward_decision(
        self, sig: ApproveSignal | RejectSignal | DecideUpdate, run_id: str
    ) -> None:
        """Send a decision for a child's call on to the child (as a signal); the child checks it."""
        if isinstance(sig, DecideUpdate):
            name = sig.decision
            if sig.decision == "approve":
                payload: BaseModel = ApproveSignal(
                    tool_call_id=sig.tool_call_id,
                    principal_id=sig.principal_id,
                    arguments=sig.arguments,
                    comment=sig.comment,
                    roles=sig.roles,
                )
            else:
                payload = RejectSignal(
                    tool_call_id=sig.tool_call_id,
                    principal_id=sig.principal_id,
                    reason=sig.reason or sig.comment or "rejected",
                    roles=sig.roles,
                )
        else:
            name = "approve" if isinstance(sig, ApproveSignal) else "reject"
            payload = sig
        self.ctx.emit(
            "decision_forwarded", run_id=run_id, tool_call_id=sig.tool_call_id, decision=name
        )
        handle = workflow.get_external_workflow_handle(run_id)
        asyncio.ensure_future(_quietly(handle.signal(name, payload)))

    async def ask(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo, share: int
    ) -> turn.Settled:
        """Run the child of one ``ask_*`` call; returns how the call ended and the model's text.

        ``share``: how many children of this turn share what is left of the budget. Never raises
        for the child's outcome; when the call is cancelled (interrupt, deadline) the child is
        interrupted and the call ends once the child has (its usage counted).
        """
        agent = info.agent or info.name
        ran_with = turn.ran_with(rec)
        task = task_of(ran_with if isinstance(ran_with, dict) else call.arguments)
        if task is None:
            return turn.Settled(
                "error", f"ask_{agent} needs a `task`: the task for {agent}, as a non-empty string."
            )
        s, req = self.ctx.s, self.ctx.req()
        child_id = child_workflow_id(workflow.info().workflow_id, agent, s.delegation.children)
        limits = child_limits(
            s.budget.usage, s.budget.max_total_tokens, s.budget.max_cost_usd, share
        )
        child_req = child_request(req, agent, task, limits)
        record = ChildRecord(run_id=child_id, agent=agent, tool_call_id=call.id, turn=s.turn)
        s.delegation.children.append(record)
        rec.status = "running"
        handle = await workflow.start_child_workflow(
            "AgentRun",
            child_req,
            id=child_id,
            result_type=RunResult,
            parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
            search_attributes=self._child_search_attributes(child_req),
            static_summary=render.static_summary(child_req),
            static_details=render.static_details(child_req),
        )
        self.ctx.emit(
            "child_started", run_id=child_id, agent=agent, tool_call_id=call.id, task=task
        )
        self.ctx.publish()
        result = await self._child_result(handle)
        return self._child_ended(record, agent, result)

    async def _child_result(
        self, handle: workflow.ChildWorkflowHandle[Any, RunResult]
    ) -> RunResult:
        """The child's result; when this call is cancelled meanwhile, interrupt the child first.

        The cancellation is not re-raised: the call ends normally once the child has, so that
        ``asyncio.gather`` over a turn's calls waits for every child (one cancelled call would
        end the gather at once) and each child's usage is counted before the run stops.
        """
        try:
            return await asyncio.shield(handle)
        except asyncio.CancelledError:
            await handle.signal("interrupt", {"reason": "the parent run was interrupted"})
            return await asyncio.shield(handle)

    def _child_ended(self, record: ChildRecord, agent: str, result: RunResult) -> turn.Settled:
        s = self.ctx.s
        record.status = result.status
        record.usage = result.usage
        charges.add(s, result.usage)
        before = shown_status(s)
        s.delegation.child_pending.pop(record.run_id, None)
        self._shown_status_changed(before)
        status, text = child_answer(agent, result)
        self.ctx.emit(
            "child_finished",
            run_id=record.run_id,
            agent=agent,
            status=result.status,
            usage=result.usage.model_dump(),
        )
        self.ctx.publish()
        return turn.Settled("ok" if status == "ok" else "error", text)

    def _child_search_attributes(self, child: RunRequest) -> TypedSearchAttributes | None:
        """The child's search attributes at start (None when the parent's namespace has none)."""
        if not self.ctx.s.visibility.search_attributes:
            return None
        pairs: list[SearchAttributePair[Any]] = [
            SearchAttributePair(SearchAttributeKey.for_keyword("AgentName"), child.agent),
            SearchAttributePair(SearchAttributeKey.for_keyword("TenantId"), child.tenant_id),
            SearchAttributePair(SearchAttributeKey.for_keyword("PrincipalId"), child.principal_id),
        ]
        return TypedSearchAttributes(pairs)


async def _quietly(send: Awaitable[None]) -> None:
    """Await a signal to another run; one that cannot be delivered (the run ended) is logged."""
    try:
        await send
    except Exception as e:  # the other run closed meanwhile: nothing to deliver to
        workflow.logger.info("signal to another run not delivered", extra={"error": str(e)})
