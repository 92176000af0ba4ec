"""Sub-agents as child runs: ``ask_<NAME>`` starts a child ``AgentRun`` and returns its answer.

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
    from pydantic import BaseModel, Field

    import workflows.render as render
    from activities.contracts import ToolCallRequest, ToolInfo, Usage
    from workflows.models import (
        ApproveSignal,
        ChildRecord,
        DecideUpdate,
        LimitsOverride,
        LiveStatus,
        PendingApproval,
        RejectSignal,
        RunRequest,
        RunResult,
        RunStatus,
        ToolCallRecord,
    )
    from workflows.policy import parse_arguments

if TYPE_CHECKING:
    from workflows.models import RunData
    from workflows.run_context import RunContext

SA_PARENT_RUN = SearchAttributeKey.for_keyword("ParentRunId")
"""Temporal's own (system) search attribute of a child workflow: its parent's run id; with
``ParentWorkflowId`` (the parent's workflow id) the server sets both, a run cannot."""
CHILD_APPROVALS_SIGNAL = "child_approvals"
"""Signal a child sends its parent whenever the calls it waits on change (:class:`ChildApprovals`)."""
ANSWER_CHARS = 16_000
"""Characters of a child's answer given to the parent's model at most."""


class ChildApprovals(BaseModel):
    """Payload of signal ``child_approvals``: the calls a child run waits on now (may be [])."""

    run_id: str
    pending: list[PendingApproval] = Field(default_factory=list[PendingApproval])


# ------------------------------------------------------------------ pure


def child_workflow_id(parent_id: str, agent: str, children: list[ChildRecord]) -> str:
    """``<parent id>.<agent>-<n>``, ``n`` one more than this parent's children of ``agent``."""
    n = 1 + sum(1 for c in children if c.agent == agent)
    return f"{parent_id}.{agent}-{n}"


def task_of(arguments: str | dict[str, Any]) -> str | None:
    """The ``task`` argument of an ``ask_*`` call, or None when missing or empty."""
    args = arguments if isinstance(arguments, dict) else parse_arguments(arguments)
    task = args.get("task") if isinstance(args, dict) else None
    return task.strip() if isinstance(task, str) and task.strip() else None


def child_limits(
    used: Usage, max_total_tokens: int | None, max_cost_usd: float | None, share: int
) -> LimitsOverride:
    """The child's budget: an even ``share`` of what is left of the parent's (None: no cap)."""
    share = max(share, 1)
    tokens = None
    if max_total_tokens is not None:
        tokens = max((max_total_tokens - used.total_tokens) // share, 1)
    cost = None
    if max_cost_usd is not None:
        cost = max((max_cost_usd - used.cost_usd) / share, 1e-9)
    return LimitsOverride(max_total_tokens=tokens, max_cost_usd=cost)


def child_request(parent: RunRequest, agent: str, task: str, limits: LimitsOverride) -> RunRequest:
    """The child's start input: its agent and task; the parent's tenant, principal, spec file."""
    return RunRequest(
        agent=agent,
        input=task,
        tenant_id=parent.tenant_id,
        principal_id=parent.principal_id,
        mode="task",
        limits=limits,
        spec_file=parent.spec_file,
    )


def child_answer(agent: str, result: RunResult) -> tuple[str, str]:
    """``(status, text)`` of the ``ask_*`` call from the child's result: ``ok`` or ``error``."""
    output = result.output or ""
    if len(output) > ANSWER_CHARS:
        output = output[:ANSWER_CHARS] + " [truncated]"
    if result.status == "completed":
        return "ok", output
    partial = f" Its last text: {output}" if output else ""
    why = f": {result.error}" if result.error else ""
    return "error", (
        f"The agent {agent} ended {result.status} ({result.stopped_reason}{why}).{partial}"
    )


def with_child_approvals(
    own: list[PendingApproval], children: dict[str, list[PendingApproval]]
) -> list[PendingApproval]:
    """The run's own pending approvals, then each child's with ``run_id`` set."""
    out = list(own)
    for run_id, pending in children.items():
        out += [p.model_copy(update={"run_id": run_id}) for p in pending]
    return out


def shown_status(data: RunData) -> LiveStatus | RunStatus:
    """The status people see: ``awaiting_approval`` while a child run waits for a person.

    That is while the run itself is ``running`` (it waits on that child); else ``data.status``.
    Used by the ``state`` query, the Web UI details, the event stream's ``status`` events and
    search attribute ``AgentStatus``, so ``agentctl list --status awaiting_approval`` finds the
    parent too.
    """
    if data.status == "running" and any(data.child_pending.values()):
        return "awaiting_approval"
    return data.status


def refused_by_child(
    children: dict[str, list[PendingApproval]], tool_call_id: str, principal_id: str
) -> str | None:
    """Why a child's call may not be decided by ``principal_id``, as far as the parent can tell.

    The parent knows the call's approvers, not the child's roles: when every approver is a
    principal id (no ``role:NAME``) and ``principal_id`` is none of them, the reason; else None
    (the child checks, and ignores a decision it refuses).
    """
    for run_id, pending in children.items():
        for p in pending:
            if p.tool_call_id != tool_call_id or not p.approvers:
                continue
            if any(a.startswith("role:") for a in p.approvers) or principal_id in p.approvers:
                return None
            return (
                f"principal {principal_id!r} is not among the approvers {p.approvers} "
                f"of {tool_call_id} in child run {run_id}"
            )
    return None


def child_holding(children: dict[str, list[PendingApproval]], tool_call_id: str) -> str | None:
    """The child run whose pending approvals hold ``tool_call_id``, or None."""
    for run_id, pending in children.items():
        if any(p.tool_call_id == tool_call_id for p in pending):
            return run_id
    return None


def children_markdown(children: list[ChildRecord], lineage: list[str]) -> str:
    """Web UI details: the run's child runs (id, agent, status, tokens) and its handoffs."""
    lines: list[str] = []
    if lineage:
        lines += ["", "**Agents (handoffs):** " + " → ".join(f"`{a}`" for a in lineage)]
    if children:
        lines += [
            "",
            "**Sub-agents:**",
            "",
            "| run | agent | status | tokens |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| `{c.run_id}` | {c.agent} | {c.status} | {c.usage.total_tokens} |" for c in children
        ]
    return "\n".join(lines) + ("\n" if lines else "")


# ------------------------------------------------------------------ in the workflow


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
        payload = ChildApprovals(run_id=info.workflow_id, pending=list(self.ctx.s.pending.values()))
        handle = workflow.get_external_workflow_handle(info.parent.workflow_id)
        asyncio.ensure_future(_quietly(handle.signal(CHILD_APPROVALS_SIGNAL, payload)))

    def on_approvals(self, got: ChildApprovals) -> None:
        """A child's pending approvals arrived (signal ``child_approvals``): shown in this run."""
        s = self.ctx.s
        if not any(c.run_id == got.run_id and c.status == "running" for c in s.children):
            self.ctx.ignore(CHILD_APPROVALS_SIGNAL, "system", f"{got.run_id} is no running child")
            return
        before = shown_status(s)
        if got.pending:
            s.child_pending[got.run_id] = got.pending
        else:
            s.child_pending.pop(got.run_id, None)
        self._shown_status_changed(before)
        self.ctx.publish()

    def _shown_status_changed(self, before: LiveStatus | RunStatus) -> None:
        """Upsert ``AgentStatus`` when a child's approvals changed the status people see."""
        if shown_status(self.ctx.s) != before and self.ctx.versions.upsert_shown_status():
            self.ctx.upsert_search_attributes()

    def child_of_call(self, tool_call_id: str) -> str | None:
        """The child run waiting on ``tool_call_id`` (None: not a child's call)."""
        return child_holding(self.ctx.s.child_pending, tool_call_id)

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
    ) -> str:
        """Run the child of one ``ask_*`` call; returns the text for the model.

        ``share``: how many children of this turn share what is left of the budget. Never raises
        for the child's outcome; when the call is cancelled (interrupt, deadline) the child is
        interrupted and the call ends once the child has (its usage counted).
        """
        agent = info.agent or info.name
        task = task_of(rec.arguments if isinstance(rec.arguments, dict) else call.arguments)
        if task is None:
            rec.status = "error"
            return f"ask_{agent} needs a `task`: the task for {agent}, as a non-empty string."
        s, req = self.ctx.s, self.ctx.req()
        child_id = child_workflow_id(workflow.info().workflow_id, agent, s.children)
        limits = child_limits(s.usage, s.max_total_tokens, s.max_cost_usd, share)
        child_req = child_request(req, agent, task, limits)
        record = ChildRecord(run_id=child_id, agent=agent, tool_call_id=call.id, turn=s.turn)
        s.children.append(record)
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
        return self._child_ended(record, rec, agent, result)

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

    def _child_ended(
        self,
        record: ChildRecord,
        rec: ToolCallRecord,
        agent: str,
        result: RunResult,
    ) -> str:
        s = self.ctx.s
        record.status = result.status
        record.usage = result.usage
        s.usage = s.usage.add(result.usage)
        before = shown_status(s)
        s.child_pending.pop(record.run_id, None)
        self._shown_status_changed(before)
        status, text = child_answer(agent, result)
        rec.status = "ok" if status == "ok" else "error"
        self.ctx.emit(
            "child_finished",
            run_id=record.run_id,
            agent=agent,
            status=result.status,
            usage=result.usage.model_dump(),
        )
        self.ctx.publish()
        return text

    def _child_search_attributes(self, child: RunRequest) -> TypedSearchAttributes | None:
        """The child's search attributes at start (None when the parent's namespace has none)."""
        if not self.ctx.s.search_attributes:
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
