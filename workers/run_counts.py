"""Runs by status, counted by Temporal visibility at scrape time (the ``/metrics`` gauges).

:class:`RunCounts` asks the namespace's visibility store, at most once per
``AGENT_METRICS_RUN_COUNTS_SECONDS`` (15 s by default), when ``/metrics`` is scraped:

* ``agent_runs{execution_status}``: ``AgentRun`` workflows by Temporal's ``ExecutionStatus``
  (``Running``, ``Completed``, ``Failed``, ``Canceled``, ``Terminated``, ``ContinuedAsNew``,
  ``TimedOut``), closed ones as far as the namespace's retention keeps them. One count query
  with ``GROUP BY ExecutionStatus``.
* ``agent_runs_open{status}``: open runs by the runtime's own ``AgentStatus`` search attribute
  (``running``, ``awaiting_approval``, ``paused``, ...). Temporal groups counts by
  ``ExecutionStatus`` only, so one count query per status, concurrently.
* ``agent_runs_awaiting_approval``: open runs whose ``AgentStatus`` is ``awaiting_approval``
  (each waits for at least one person's decision).
* ``agent_run_counts_updated_timestamp_seconds`` (Unix time of the last good refresh) and
  ``agent_run_counts_errors_total`` (refreshes that failed; the gauges then keep their values).

These are the namespace's numbers, the same from every process that serves them: aggregate them
with ``max``, not ``sum``. A namespace without the runtime's search attributes
(``temporal-dev.yml``) gets ``agent_runs`` only.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import get_args

import structlog
from prometheus_client import Counter, Gauge
from temporalio.client import Client

from activities.search_attributes import namespace_has_search_attributes
from workflows.models import WORKFLOW_NAME, LiveStatus

__all__ = ["EXECUTION_STATUSES", "RunCounts"]

log = structlog.get_logger("workers.run_counts")

EXECUTION_STATUSES = (
    "Running",
    "Completed",
    "Failed",
    "Canceled",
    "Terminated",
    "ContinuedAsNew",
    "TimedOut",
)
"""Temporal's ``ExecutionStatus`` values as visibility queries name them."""

QUERY_TIMEOUT = timedelta(seconds=5)
"""Longest wait for one count query: a scrape must not hang on a slow visibility store."""

RUNS = Gauge(
    "agent_runs",
    "AgentRun workflows in the namespace's visibility, by Temporal ExecutionStatus.",
    ["execution_status"],
)
RUNS_OPEN = Gauge(
    "agent_runs_open",
    "Open AgentRun workflows by the runtime's AgentStatus search attribute.",
    ["status"],
)
AWAITING_APPROVAL = Gauge(
    "agent_runs_awaiting_approval",
    "Open AgentRun workflows waiting for a person's decision (AgentStatus awaiting_approval).",
)
UPDATED = Gauge(
    "agent_run_counts_updated_timestamp_seconds",
    "Unix time of the last successful refresh of the run counts.",
)
ERRORS = Counter(
    "agent_run_counts_errors",
    "Refreshes of the run counts that failed (the gauges kept their last values).",
)


def _base_query() -> str:
    return f"WorkflowType = '{WORKFLOW_NAME}'"


class RunCounts:
    """The run-count gauges of one namespace, refreshed at most every ``every_seconds``.

    Args:
        client: a client of the namespace to count.
        every_seconds: the least time between two refreshes; a scrape in between reuses the
            last counts (so many scrapers cost one set of queries).
    """

    def __init__(self, client: Client, every_seconds: float = 15.0) -> None:
        self._client = client
        self._every = every_seconds
        self._last = float("-inf")
        self._lock = asyncio.Lock()
        self._with_status: bool | None = None  # whether the namespace has AgentStatus

    async def refresh(self) -> None:
        """Count again unless the last refresh is recent; never raises (errors are counted)."""
        async with self._lock:
            if time.monotonic() - self._last < self._every:
                return
            self._last = time.monotonic()
            try:
                await self._count()
            except Exception as e:  # noqa: BLE001 - a scrape shows stale counts, never fails
                ERRORS.inc()
                log.warning("run_counts_failed", error=str(e)[:300])
                return
            UPDATED.set(time.time())

    async def _count(self) -> None:
        total = await self._client.count_workflows(
            f"{_base_query()} GROUP BY ExecutionStatus", rpc_timeout=QUERY_TIMEOUT
        )
        by_execution = {str(g.group_values[0]): g.count for g in total.groups if g.group_values}
        for status in [
            *EXECUTION_STATUSES,
            *(s for s in by_execution if s not in EXECUTION_STATUSES),
        ]:
            RUNS.labels(status).set(by_execution.get(status, 0))
        if self._with_status is None:
            self._with_status = await namespace_has_search_attributes(self._client)
            if not self._with_status:
                log.info("run_counts_without_agent_status", namespace=self._client.namespace)
        if self._with_status:
            await self._count_open()

    async def _count_open(self) -> None:
        statuses: tuple[str, ...] = get_args(LiveStatus)
        queries = [
            f"{_base_query()} AND ExecutionStatus = 'Running' AND AgentStatus = '{s}'"
            for s in statuses
        ]
        counts = await asyncio.gather(
            *(self._client.count_workflows(q, rpc_timeout=QUERY_TIMEOUT) for q in queries)
        )
        for status, count in zip(statuses, counts, strict=True):
            RUNS_OPEN.labels(status).set(count.count)
            if status == "awaiting_approval":
                AWAITING_APPROVAL.set(count.count)
