"""Workflow ``EvalSuite``: one evaluation, a child ``AgentRun`` per (case, variant, repeat).

Each child is a real run (same specs, policy, budgets and limits as production) on the
evaluation task queue (``<queue>.eval`` unless the request names one) with Temporal priority key
``priority_key`` (5, the lowest, by default) and the suite's tenant as fairness key, so runs of
people are served first. At most ``max_concurrency`` children run at once. When a child finishes,
activity ``eval.score`` (and ``eval.judge`` when the dataset has a judge) scores it and the
record is kept; the records are the suite's result and its ``progress`` query.

Approvals: a child that waits for a person signals its parent (``child_approvals``, as it would a
parent run); the suite answers each call once with the dataset's scripted approver
(:class:`~activities.evals.contracts.Approver`), by signalling ``approve`` or ``reject`` to the child.

Durability: children and scores are events in the suite's history, so a worker crash replays the
suite without running a finished case again; a child in flight goes on where it was.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, cast

from temporalio import workflow
from temporalio.common import Priority, RawValue, RetryPolicy
from temporalio.exceptions import ApplicationError, ChildWorkflowError, FailureError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import fairness_key
    from activities.evals.contracts import (
        EVAL_JUDGE,
        EVAL_QUEUE_SUFFIX,
        EVAL_SCORE,
        SUITE_WORKFLOW,
        ApproverRule,
        Case,
        Recording,
        RunFacts,
        RunRecord,
        Score,
        ScoreInput,
        SuiteProgress,
        SuiteRequest,
        Variant,
    )
    from activities.evals.scorers import passed
    from workflows.child_rules import CHILD_APPROVALS_SIGNAL, ChildApprovals
    from workflows.inbound import Invalid, decode, decode_args
    from workflows.models import (
        WORKFLOW_NAME,
        ApproveSignal,
        LimitsOverride,
        RejectSignal,
        RunRequest,
        RunResult,
    )

OUTPUT_CHARS = 2000
"""Characters of a run's answer kept in its record (the run's own result keeps all of it)."""


def child_id(suite_id: str, case: Case, variant: Variant, repeat: int) -> str:
    """``<suite id>.<case id>.<variant>.<repeat>``: the workflow id of one evaluation run."""
    return f"{suite_id}.{case.id}.{variant.name}.{repeat}"


def child_request(req: SuiteRequest, case: Case, variant: Variant) -> RunRequest:
    """The child's ``RunRequest``: the variant's agent and model, the case's input and tools."""
    tools = case.metadata.get("tools")
    return RunRequest(
        agent=variant.agent,
        input=case.input,
        tenant_id=req.tenant_id,
        principal_id=req.principal_id,
        model=variant.model,
        spec_file=req.spec_file,
        limits=LimitsOverride(max_turns=req.max_turns),
        tools=[str(t) for t in cast("list[Any]", tools)] if isinstance(tools, list) else None,
        recorded_tools=(case.recording or Recording()) if req.replay_tools else None,
    )


def facts_of(result: RunResult) -> RunFacts:
    """What the scorers read of a run's result."""
    return RunFacts(
        status=result.status,
        output=result.output,
        tool_calls=[
            c.model_dump(
                mode="json",
                include={"name", "arguments", "status", "turn", "run_arguments", "recorded"},
                exclude_none=True,
            )
            for c in result.tool_calls
        ],
        total_tokens=result.usage.total_tokens,
        cost_usd=result.usage.cost_usd,
        latency_ms=result.duration_ms,
        error=result.error,
    )


def record_of(
    key: tuple[str, str, int], run_id: str, facts: RunFacts, scores: list[Score]
) -> RunRecord:
    """The record of one finished run: ``key`` is (case id, variant, repeat)."""
    output = facts.output
    if output is not None and len(output) > OUTPUT_CHARS:
        output = output[:OUTPUT_CHARS] + " [truncated]"
    return RunRecord(
        case_id=key[0],
        variant=key[1],
        repeat=key[2],
        run_id=run_id,
        status=facts.status,
        passed=passed(facts.status, scores),
        scores=scores,
        tokens=facts.total_tokens,
        cost_usd=facts.cost_usd,
        latency_ms=facts.latency_ms,
        tool_calls=facts.tool_calls,
        output=output,
        error=facts.error,
    )


@workflow.defn(name=SUITE_WORKFLOW)
class EvalSuite:
    """An evaluation suite. Query ``progress`` returns :class:`SuiteProgress` at any time."""

    @workflow.init
    def __init__(self, raw: RawValue = None) -> None:  # pyright: ignore[reportArgumentType] - the SDK's default
        self._req = decode(raw, SuiteRequest, "start input")
        self._records: list[RunRecord] = []
        self._decided: dict[tuple[str, str], str] = {}
        self._recordings: dict[str, Recording] = {}  # replays: child run id -> its recording
        self._done = False

    @workflow.run
    async def run(self, raw: RawValue = None) -> SuiteProgress:  # pyright: ignore[reportArgumentType] - the SDK's default
        """Run every (case, variant, repeat) and score it; returns the records.

        Raises:
            ApplicationError: the start input is not a valid ``SuiteRequest`` (the suite fails).
        """
        req = self._req
        if isinstance(req, Invalid):
            raise ApplicationError(req.problem, type="InvalidSuiteRequest", non_retryable=True)
        gate = asyncio.Semaphore(req.max_concurrency)
        jobs = [(c, v, r) for c in req.cases for v in req.variants for r in range(req.repeat)]
        self._show()
        await asyncio.gather(*(self._one(req, gate, c, v, r) for c, v, r in jobs))
        self._done = True
        self._show()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.progress()

    async def _one(
        self, req: SuiteRequest, gate: asyncio.Semaphore, case: Case, variant: Variant, r: int
    ) -> None:
        async with gate:
            run_id = child_id(workflow.info().workflow_id, case, variant, r)
            if req.replay_tools and case.recording is not None:
                self._recordings[run_id] = case.recording
            facts = await self._child(req, run_id, case, variant)
            inp = ScoreInput(case=case, run=facts, config=req.scorers)
            scores = await workflow.execute_activity(
                EVAL_SCORE,
                inp,
                result_type=list[Score],
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"score: {case.id} · {variant.name} #{r}",
            )
            if req.scorers.judge is not None:
                scores.append(
                    await workflow.execute_activity(
                        EVAL_JUDGE,
                        inp,
                        result_type=Score,
                        start_to_close_timeout=timedelta(seconds=180),
                        retry_policy=RetryPolicy(maximum_attempts=5),
                        summary=f"judge: {req.scorers.judge.model} on {case.id} · {variant.name}",
                    )
                )
            self._records.append(record_of((case.id, variant.name, r), run_id, facts, scores))
            self._show()

    async def _child(
        self, req: SuiteRequest, run_id: str, case: Case, variant: Variant
    ) -> RunFacts:
        queue = req.task_queue or workflow.info().task_queue + EVAL_QUEUE_SUFFIX
        try:
            result = await workflow.execute_child_workflow(
                WORKFLOW_NAME,
                child_request(req, case, variant),
                id=run_id,
                task_queue=queue,
                result_type=RunResult,
                priority=Priority(
                    priority_key=req.priority_key,
                    fairness_key=fairness_key(req.tenant_id) or None,
                ),
                static_summary=f"eval {case.id} · {variant.name}",
            )
        except ChildWorkflowError as e:
            # a child workflow's cause is a FailureError (converted from the failure proto)
            cause = cast(FailureError, e.cause).message if e.cause is not None else str(e)
            return RunFacts(status="failed", error=f"the run failed: {cause}")
        return facts_of(result)

    # ------------------------------------------------------------------ approvals

    @workflow.signal(name=CHILD_APPROVALS_SIGNAL)
    def child_approvals(self, *args: Any) -> None:
        """A child's pending approvals: each new one is decided by the dataset's approver."""
        got = decode_args(args, ChildApprovals, f"signal {CHILD_APPROVALS_SIGNAL}")
        req = self._req
        if isinstance(got, Invalid) or isinstance(req, Invalid):
            workflow.logger.warning("signal ignored", extra={"signal": CHILD_APPROVALS_SIGNAL})
            return
        if not got.run_id.startswith(workflow.info().workflow_id + "."):
            return
        for p in got.pending:
            key = (got.run_id, p.tool_call_id)
            if key in self._decided:
                continue
            rule = as_recorded(self._recordings.get(got.run_id), p.name, p.arguments)
            rule = rule or req.approver.decide(p.name)
            self._decided[key] = rule.decision
            who = req.approver.principal_id
            payload: ApproveSignal | RejectSignal
            if rule.decision == "approve":
                payload = ApproveSignal(
                    tool_call_id=p.tool_call_id, principal_id=who, comment="eval approver"
                )
            else:
                payload = RejectSignal(
                    tool_call_id=p.tool_call_id, principal_id=who, reason=rule.reason
                )
            handle = workflow.get_external_workflow_handle(got.run_id)
            asyncio.ensure_future(_quietly(handle.signal(rule.decision, payload)))

    # ------------------------------------------------------------------ views

    @workflow.query(name="progress")
    def progress(self) -> SuiteProgress:
        """The records so far; ``done`` once every run is scored."""
        req = self._req
        if isinstance(req, Invalid):
            return SuiteProgress(
                suite_id=workflow.info().workflow_id, dataset="", variants=[], repeat=1, total=0
            )
        return SuiteProgress(
            suite_id=workflow.info().workflow_id,
            dataset=req.dataset,
            variants=req.variants,
            repeat=req.repeat,
            total=len(req.cases) * len(req.variants) * req.repeat,
            records=list(self._records),
            done=self._done,
            decisions=len(self._decided),
        )

    @workflow.query(name="request")
    def request(self) -> SuiteRequest | None:
        """The suite's start input (cases, variants, scorers); None when it was invalid."""
        return None if isinstance(self._req, Invalid) else self._req

    def _show(self) -> None:
        p = self.progress()
        lines = [f"**{p.dataset}**: {len(p.records)} of {p.total} runs scored"]
        for v in p.variants:
            rs = [r for r in p.records if r.variant == v.name]
            if rs:
                lines.append(f"- {v.name}: {sum(r.passed for r in rs)}/{len(rs)} passed")
        workflow.set_current_details("\n".join(lines))


def as_recorded(recording: Recording | None, name: str, arguments: Any) -> ApproverRule | None:
    """A replay's approval decided as in the recorded run, when it shows the call decided.

    The first recorded call of ``name`` with these arguments: one that ran was approved (or
    allowed), a ``rejected`` one is rejected again; None when the recording has no such call.
    """
    if recording is None:
        return None
    for c in recording.calls:
        if c.matches(name, arguments) and (c.answered or c.status == "rejected"):
            if c.answered:
                return ApproverRule(tool=name, decision="approve")
            return ApproverRule(tool=name, decision="reject", reason="rejected in the recorded run")
    return None


async def _quietly(coro: Any) -> None:
    """Await a signal to a child; one that already ended is not an error of the suite."""
    try:
        await coro
    except Exception as e:  # noqa: BLE001 - the child may have finished meanwhile
        workflow.logger.info("signal to a child not delivered", extra={"error": str(e)})
