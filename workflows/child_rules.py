"""The pure half of sub-agents (workflows/children.py): ids, requests, budgets, answers, approvals.

Plain functions over the run's data, tested without a server; :class:`workflows.children.ChildStep`
carries them out. Apart so that the run's views (workflows/state.py) and handlers read them
without importing the step that starts child workflows (no import cycle, ``make lint``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.common import SearchAttributeKey

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel, Field

    from activities.contracts import Usage
    from workflows.models import (
        ChildRecord,
        LimitsOverride,
        LiveStatus,
        PendingApproval,
        RunRequest,
        RunResult,
        RunStatus,
    )
    from workflows.policy import parse_arguments

if TYPE_CHECKING:
    from workflows.models import RunData

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
    """The child's start input: its agent and task; the parent's tenant, principal, roles, spec file."""
    return RunRequest(
        agent=agent,
        input=task,
        tenant_id=parent.tenant_id,
        principal_id=parent.principal_id,
        roles=list(parent.roles),
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
    if data.status == "running" and any(data.delegation.child_pending.values()):
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
