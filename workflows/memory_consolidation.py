"""Workflow ``MemoryConsolidation``: one per (tenant, principal), turning finished runs into memory.

Runs arrive by signal ``run_finished`` (the run's ``memory.handoff`` signal-with-starts this
workflow). A durable timer debounces: consolidation starts ``debounce_seconds`` after the last
run arrived, then one ``memory.consolidate`` activity handles every run pending (LangMem's
``ReflectionExecutor(after_seconds)`` shape, made durable). The workflow then waits for more, and
continues as new after 50 batches so its history stays small.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.memory.consolidation import (
        CONSOLIDATE,
        CONSOLIDATION_WORKFLOW,
        ConsolidateInput,
    )

BATCHES_PER_RUN = 50
IDLE_HOURS = 24


@workflow.defn(name=CONSOLIDATION_WORKFLOW)
class MemoryConsolidation:
    """Consolidates the finished runs of one (tenant, principal), debounced by a timer."""

    def __init__(self) -> None:
        self._pending: list[str] = []
        self._arrived = 0

    @workflow.signal(name="run_finished")
    def run_finished(self, run_id: str) -> None:
        """A run of this (tenant, principal) finished and has a transcript to consolidate."""
        if isinstance(run_id, str) and run_id not in self._pending:  # pyright: ignore[reportUnnecessaryIsInstance] - unchecked arg
            self._pending.append(run_id)
            self._arrived += 1

    @workflow.query(name="pending")
    def pending(self) -> list[str]:
        """Runs waiting for consolidation."""
        return list(self._pending)

    @workflow.run
    async def run(
        self,
        tenant_id: str,
        principal_id: str,
        debounce_seconds: float,
        carried: list[str] | None = None,
    ) -> int:
        """Consolidate batches until idle for a day; returns items written by this execution."""
        self._pending.extend(r for r in carried or [] if r not in self._pending)
        written = 0
        for _ in range(BATCHES_PER_RUN):
            try:
                await workflow.wait_condition(
                    lambda: bool(self._pending), timeout=timedelta(hours=IDLE_HOURS)
                )
            except TimeoutError:
                return written
            seen = -1
            while seen != self._arrived:  # debounce: quiet for debounce_seconds
                seen = self._arrived
                try:
                    await workflow.wait_condition(
                        lambda seen=seen: self._arrived != seen,
                        timeout=timedelta(seconds=max(debounce_seconds, 0.001)),
                    )
                except TimeoutError:
                    break
            batch = list(self._pending)
            written += await workflow.execute_activity(
                CONSOLIDATE,
                ConsolidateInput(tenant_id=tenant_id, principal_id=principal_id, run_ids=batch),
                result_type=int,
                start_to_close_timeout=timedelta(minutes=10),
                heartbeat_timeout=timedelta(minutes=2),
                retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=30)),
                summary=f"memory: consolidate {len(batch)} run(s)",
            )
            self._pending = [r for r in self._pending if r not in batch]
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(args=[tenant_id, principal_id, debounce_seconds, self._pending])
