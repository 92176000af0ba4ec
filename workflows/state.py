"""Views of the run state (:class:`workflows.models.RunData`), pure and tested without a server.

The ``state`` query, the Web UI details, the ``RunResult`` and the search attributes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio.common import SearchAttributeUpdate

import workflows.render as render
from workflows.child_rules import children_markdown, shown_status, with_child_approvals
from workflows.models import IgnoredSignal, RunData, RunResult, RunState, RunStatus
from workflows.plan import plan_markdown
from workflows.run_parts import PART_OF
from workflows.view_models import (  # the keys live with the views a listing reads
    SA_AGENT as SA_AGENT,
)
from workflows.view_models import (
    SA_COST as SA_COST,
)
from workflows.view_models import (
    SA_PARENT as SA_PARENT,
)
from workflows.view_models import (
    SA_PRINCIPAL as SA_PRINCIPAL,
)
from workflows.view_models import (
    SA_SPEC as SA_SPEC,
)
from workflows.view_models import (
    SA_STATUS as SA_STATUS,
)
from workflows.view_models import (
    SA_TENANT as SA_TENANT,
)
from workflows.view_models import (
    SA_TOKENS as SA_TOKENS,
)


def _shared(data: RunData, view: type[RunState] | type[RunResult]) -> dict[str, Any]:
    """Fields of ``data`` (and of its request) that ``view`` has under the same name."""
    out: dict[str, Any] = {}
    for name in view.model_fields:
        if (name in RunData.model_fields or name in PART_OF) and name not in ("req", "pinned"):
            out[name] = data.get_flat(name)  # a part's field by its flat name
        elif data.req is not None and name in type(data.req).model_fields:
            out[name] = getattr(data.req, name)
    out["spec_hash"] = data.pinned.spec_hash if data.pinned else ""
    return out


def run_state(data: RunData, parked: list[IgnoredSignal] | None = None) -> RunState:
    """Answer of the ``state`` query: every field of RunState read from the run state.

    ``parked`` are decisions parked for calls not known yet (workflows/approvals.py, Decisions), shown as ignored.
    """
    fields: dict[str, Any] = {
        **_shared(data, RunState),
        "status": shown_status(data),
        "pending_approvals": with_child_approvals(
            list(data.approvals.pending.values()), data.delegation.child_pending
        ),
        "pending_client_tools": list(data.client_calls.client_waiting.values()),
        "ignored_signals": data.ignored_signals + (parked or []),
    }
    return RunState(**fields)


def run_result(
    data: RunData, status: RunStatus, reason: str, error: str | None, now: datetime
) -> RunResult:
    """The run's ``RunResult``; ``duration_ms`` is workflow time since the run started.

    Fields named alike are copied by :func:`_shared`: ``output``, ``usage``, ``tool_calls``,
    ``decisions``, ``children``, ``plan``, ``model_steps`` (and the rest RunData has) from ``data``;
    ``agent``, ``parent_run_id`` and ``fork_turn`` from its request; ``spec_hash`` from its pinned
    spec. The arguments fill the others.
    """
    duration = (now - data.started_at).total_seconds() * 1000
    fields: dict[str, Any] = {
        **_shared(data, RunResult),
        "status": status,
        "turns": data.turn,
        "duration_ms": round(duration, 1),
        "stopped_reason": reason,
        "error": error,
    }
    return RunResult(**fields)


def details(data: RunData) -> str | None:
    """Markdown of the Web UI's current details (None before the spec is pinned)."""
    if data.pinned is None:
        return None
    spec = data.pinned.spec
    text = render.current_details(
        status=shown_status(data),
        turn=data.turn,
        max_turns=spec.limits.max_turns,
        model=spec.model,
        total_tokens=data.budget.usage.total_tokens,
        cost_usd=data.budget.usage.cost_usd,
        pending=with_child_approvals(
            list(data.approvals.pending.values()), data.delegation.child_pending
        ),
        tool_calls=data.tool_calls,
        last_text=data.output,
        spec_hash=data.pinned.spec_hash,
    )
    extra = children_markdown(data.delegation.children, data.delegation.lineage) + plan_markdown(
        data.plan
    )
    return text + extra if extra else text


def search_attribute_pairs(data: RunData, initial: bool) -> list[SearchAttributeUpdate[Any]]:
    """Search attributes to upsert: status, tokens and cost; with ``initial`` also who and what."""
    pairs: list[SearchAttributeUpdate[Any]] = [
        SA_STATUS.value_set(shown_status(data)),
        SA_TOKENS.value_set(data.budget.usage.total_tokens),
        SA_COST.value_set(data.budget.usage.cost_usd),
    ]
    req = data.req
    if initial and data.pinned is not None and req is not None:
        pairs += [
            SA_AGENT.value_set(req.agent),
            SA_TENANT.value_set(req.tenant_id),
            SA_PRINCIPAL.value_set(req.principal_id),
            SA_SPEC.value_set(data.pinned.spec_hash),
        ]
        if req.parent_run_id:
            pairs.append(SA_PARENT.value_set(req.parent_run_id))
    return pairs
