"""Listing runs: the visibility query ``agentctl list`` and the console use, and its results.

Re-exported by :mod:`workers.client`, where these were defined before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.client import Client

from workflows.view_models import WORKFLOW_NAME


def list_query(
    agent: str | None = None,
    status: str | None = None,
    tenant: str | None = None,
    principal: str | None = None,
) -> str:
    """Visibility query over the run's search attributes (the same one ``agentctl list`` uses).

    Each given value narrows by equality: ``AgentName``, ``AgentStatus``, ``TenantId``,
    ``PrincipalId``; values are quoted (a quote or backslash in one cannot end the string).
    """
    parts = [f"WorkflowType = '{WORKFLOW_NAME}'"]
    named = (("AgentName", agent), ("AgentStatus", status), ("TenantId", tenant))
    for key, value in (*named, ("PrincipalId", principal)):
        if value:
            parts.append(f"{key} = '{quote(value)}'")
    return " AND ".join(parts)


def quote(value: str) -> str:
    """``value`` as the inside of a visibility query's single-quoted string."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


async def list_runs(client: Client, query: str, limit: int = 50) -> Sequence[Any]:
    """Executions matching a visibility query, newest first (at most ``limit``)."""
    out = []
    async for wf in client.list_workflows(query, limit=limit):
        out.append(wf)
    return out
