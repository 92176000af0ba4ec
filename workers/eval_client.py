"""Client side of evaluations: start a suite, read its progress, rescore finished runs.

Used by ``agentctl eval`` (:mod:`workers.cli.evals`), the tests and ``bench/evals.py``.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import cast

from temporalio.client import Client, WorkflowHandle
from temporalio.common import Priority, RawValue

from activities.contracts import fairness_key
from activities.evals.activity import EvalActivities
from activities.evals.contracts import (
    LOW_PRIORITY,
    Case,
    RunRecord,
    ScoreInput,
    ScorerConfig,
    SuiteProgress,
    SuiteRequest,
)
from activities.evals.scorers import score_run
from workers.config import load_settings
from workflows.eval_suite import EvalSuite, facts_of, record_of
from workflows.models import RunResult

MAX_RUNS = 2000
"""Most runs (cases x variants x repeats) one suite may hold: each run is about a dozen events
of the suite's history, which Temporal caps at 51,200 (shared limits in docs/contract.md)."""


class SuiteTooLargeError(ValueError):
    """The suite would run more than :data:`MAX_RUNS` runs; split the dataset."""


async def start_suite(
    client: Client,
    req: SuiteRequest,
    *,
    task_queue: str | None = None,
    suite_id: str | None = None,
) -> WorkflowHandle[EvalSuite, SuiteProgress]:
    """Start ``EvalSuite`` (workflow id ``eval-<uuid4>`` unless given) on ``task_queue``.

    The suite itself runs at low priority with its tenant as fairness key, like its children.

    Raises:
        SuiteTooLargeError: more than :data:`MAX_RUNS` runs.
    """
    runs = len(req.cases) * len(req.variants) * req.repeat
    if runs > MAX_RUNS:
        raise SuiteTooLargeError(f"{runs} runs in one suite; at most {MAX_RUNS}: split the dataset")
    return await client.start_workflow(
        EvalSuite.run,
        cast("RawValue", req),  # run() takes its input raw and decodes it as a SuiteRequest
        id=suite_id or f"eval-{uuid.uuid4()}",
        task_queue=task_queue or load_settings().task_queue,
        priority=Priority(
            priority_key=LOW_PRIORITY, fairness_key=fairness_key(req.tenant_id) or None
        ),
        static_summary=f"evaluation: {req.dataset}, {runs} runs",
    )


async def progress(client: Client, suite_id: str) -> SuiteProgress:
    """The suite's records so far (query ``progress``; works after the suite has closed)."""
    raw = await client.get_workflow_handle(suite_id).query("progress")
    return SuiteProgress.model_validate(raw)


async def rescore(
    client: Client,
    prog: SuiteProgress,
    cases: list[Case],
    config: ScorerConfig,
    judge: EvalActivities | None = None,
) -> SuiteProgress:
    """The suite's records scored again from each finished run's stored result.

    Nothing calls the agent's model: each run's ``RunResult`` is read from Temporal and the
    scorers (and, with ``judge`` and ``config.judge``, the LLM judge) run here. ``cases`` may
    hold new expectations; a record whose case is missing keeps its scores.
    """
    by_id = {c.id: c for c in cases}

    async def one(rec: RunRecord) -> RunRecord:
        case = by_id.get(rec.case_id)
        if case is None:
            return rec
        try:
            result = await client.get_workflow_handle(rec.run_id, result_type=RunResult).result()
        except Exception:  # noqa: BLE001 - a failed or terminated run keeps its record
            return rec
        facts = facts_of(result)
        scores = score_run(case, facts, config)
        if judge is not None and config.judge is not None:
            scores.append(await judge.judge(ScoreInput(case=case, run=facts, config=config)))
        return record_of((rec.case_id, rec.variant, rec.repeat), rec.run_id, facts, scores)

    records = await asyncio.gather(*(one(r) for r in prog.records))
    return prog.model_copy(update={"records": list(records)})
