"""Replay recorded histories with the current workflow code, to find nondeterministic changes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client, WorkflowHistory
from temporalio.converter import DataConverter

from workers.history._fetch import fetch_chain, load_history_file
from workers.history._payloads import DEFAULT_CONVERTER


class ReplayReport(BaseModel):
    """Outcome of replaying recorded histories with the current workflow code.

    ``compatible`` is True when every history replayed without a task failure (above all
    ``NondeterminismError``); ``failure`` is the first failure's text and ``failed_run_id`` its
    execution. ``events`` is the number of events replayed, over ``run_ids`` (oldest first).
    """

    workflow_id: str
    run_ids: list[str]
    compatible: bool
    events: int
    failure: str | None = None
    failure_type: str | None = None
    failed_run_id: str | None = None


def _replayer(workflows: Sequence[type] | None, data_converter: DataConverter) -> Any:
    from temporalio.worker import Replayer

    from workers.sandbox import workflow_runner

    if workflows is None:
        from workflows.agent_run import AgentRun

        workflows = [AgentRun]
    return Replayer(
        workflows=list(workflows), data_converter=data_converter, workflow_runner=workflow_runner()
    )


async def replay_histories(
    histories: Iterable[WorkflowHistory],
    *,
    workflows: Sequence[type] | None = None,
    data_converter: DataConverter = DEFAULT_CONVERTER,
) -> ReplayReport:
    """Replay histories (one run's executions, oldest first) and report the first failure.

    Args:
        histories: the histories to replay.
        workflows: workflow classes to replay with (default: ``[AgentRun]``, the current code).
        data_converter: as the workers use.

    Raises:
        ValueError: no history.
    """
    chain = list(histories)
    if not chain:
        raise ValueError("no history to replay")
    replayer = _replayer(workflows, data_converter)
    report = ReplayReport(
        workflow_id=chain[-1].workflow_id,
        run_ids=[h.run_id for h in chain],
        compatible=True,
        events=sum(len(h.events) for h in chain),
    )
    for h in chain:
        res = await replayer.replay_workflow(h, raise_on_replay_failure=False)
        if res.replay_failure is not None:
            report.compatible = False
            report.failure = str(res.replay_failure) or repr(res.replay_failure)
            report.failure_type = type(res.replay_failure).__name__
            report.failed_run_id = h.run_id
            break
    return report


async def replay(
    client: Client, run_id: str, *, workflows: Sequence[type] | None = None
) -> ReplayReport:
    """Fetch run ``run_id``'s histories (every execution of the chain) and replay them.

    Works on running and finished runs alike. Uses the client's data converter.

    Raises:
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    chain = await fetch_chain(client, run_id)
    return await replay_histories(chain, workflows=workflows, data_converter=client.data_converter)


async def replay_file(
    path: str | Path,
    *,
    workflow_id: str | None = None,
    workflows: Sequence[type] | None = None,
    data_converter: DataConverter = DEFAULT_CONVERTER,
) -> ReplayReport:
    """Replay one stored JSON history (see :func:`load_history_file`) with the current code.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is not a JSON workflow history.
    """
    history = load_history_file(path, workflow_id)
    return await replay_histories([history], workflows=workflows, data_converter=data_converter)
