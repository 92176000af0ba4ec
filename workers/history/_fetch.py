"""Reading histories: a run's executions from the server, or a history saved as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHistory

MAX_CHAIN = 1000
"""Executions at most that :func:`fetch_chain` walks back through (a guard against cycles)."""

Histories = WorkflowHistory | Sequence[WorkflowHistory]
"""One history, or a run's chain of histories (oldest first)."""


def as_chain(histories: Histories) -> list[WorkflowHistory]:
    """``histories`` as a list (one history becomes a chain of one)."""
    return [histories] if isinstance(histories, WorkflowHistory) else list(histories)


def start_attributes(history: WorkflowHistory) -> Any:
    """The ``WorkflowExecutionStarted`` attributes of the history's first event.

    Raises:
        ValueError: the history does not begin with ``WorkflowExecutionStarted``.
    """
    if not history.events or not history.events[0].HasField(
        "workflow_execution_started_event_attributes"
    ):
        raise ValueError(
            f"history of {history.workflow_id} does not begin with WorkflowExecutionStarted"
        )
    return history.events[0].workflow_execution_started_event_attributes


async def fetch_history(
    client: Client, run_id: str, *, execution_run_id: str | None = None
) -> WorkflowHistory:
    """The event history of one execution of run ``run_id`` (a workflow id).

    Args:
        client: a connected client.
        run_id: the run's workflow id (``run-<uuid4>``).
        execution_run_id: a Temporal run id of one execution of the chain; ``None``: the latest
            execution (after continue-as-new, only the newest one: see :func:`fetch_chain`).

    Raises:
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    return await client.get_workflow_handle(run_id, run_id=execution_run_id).fetch_history()


async def fetch_chain(
    client: Client, run_id: str, *, max_runs: int = MAX_CHAIN
) -> list[WorkflowHistory]:
    """The histories of every execution of run ``run_id``'s continue-as-new chain, oldest first.

    Starts from the latest execution and follows ``continued_execution_run_id`` of each start
    event back to the first one (at most ``max_runs`` executions; older ones are left out, which
    :attr:`Audit.chain_complete` reports). A run that never continued as new gives one history.

    Raises:
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    latest = await fetch_history(client, run_id)
    chain = [latest]
    while len(chain) < max_runs:
        prev = start_attributes(chain[0]).continued_execution_run_id
        if not prev:
            break
        chain.insert(0, await fetch_history(client, run_id, execution_run_id=prev))
    return chain


def load_history_file(path: str | Path, workflow_id: str | None = None) -> WorkflowHistory:
    """Read a history saved as JSON (``WorkflowHistory.to_json()``, the Web UI's or CLI's export).

    The workflow id is ``workflow_id``, else the start event's, else the file's stem.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a JSON workflow history.
    """
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    try:
        history = WorkflowHistory.from_json(workflow_id or p.stem, text)
    except Exception as e:  # noqa: BLE001 - protobuf/json errors of many kinds
        raise ValueError(f"{p} is not a workflow history in JSON: {e}") from None
    if not history.events:
        raise ValueError(f"{p} holds no history events")
    if workflow_id is None:
        wid = start_attributes(history).workflow_id
        if wid:
            history = WorkflowHistory(wid, history.events)
    return history
