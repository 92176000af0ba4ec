"""Workflow ``AgentRun``: one durable agent run (CONTRACT.md).

Each turn: a model step (activity ``model.complete``) with the transcript and the tool schemas; if
the reply calls tools, the policy decides each call (allow / deny / approve), allowed and approved
calls run as ``tool.invoke`` activities concurrently, results go back in call order, and the loop
goes on; a reply without tool calls ends the run (``task`` mode) or waits for the next message
(``chat`` mode). The decisions are pure functions (:mod:`workflows.policy`,
:mod:`workflows.loop_detection`, :mod:`workflows.compaction`); this class wires them to
activities, timers and handlers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey, SearchAttributePair
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from activities.contracts import (
        ERR_MODEL_OUTPUT_INVALID,
        MODEL_COMPLETE,
        SPEC_RESOLVE,
        TOKENS_COUNT,
        TOOL_INVOKE,
        CallModelInput,
        CountTokensInput,
        InvokeToolInput,
        ModelReply,
        ModelSettings,
        ResolveSpecInput,
        TokenCounts,
        ToolCallRequest,
        ToolInfo,
        ToolOutcome,
        Usage,
    )
    from activities.spec import PinnedSpec
    from workflows import render
    from workflows.compaction import (
        CompactionPlan,
        plan_compaction,
        summary_request,
        token_upper_bound,
        truncate_tool_results,
    )
    from workflows.events import RunEvents
    from workflows.loop_detection import Signature, detect_loop, turn_signature
    from workflows.models import (
        WORKFLOW_NAME,
        ApproveSignal,
        CarriedState,
        DecideResult,
        DecideUpdate,
        Decision,
        IgnoredSignal,
        InterruptSignal,
        MessageSignal,
        PendingApproval,
        PrincipalSignal,
        RaiseBudgetSignal,
        RejectSignal,
        RunRequest,
        RunResult,
        RunState,
        RunStatus,
        ToolCallRecord,
    )
    from workflows.policy import evaluate, may_decide, parse_arguments

T = TypeVar("T")

SA_AGENT = SearchAttributeKey.for_keyword("AgentName")
SA_TENANT = SearchAttributeKey.for_keyword("TenantId")
SA_PRINCIPAL = SearchAttributeKey.for_keyword("PrincipalId")
SA_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
SA_TOKENS = SearchAttributeKey.for_int("TotalTokens")
SA_COST = SearchAttributeKey.for_float("CostUsd")
SA_SPEC = SearchAttributeKey.for_keyword("SpecHash")
SA_PARENT = SearchAttributeKey.for_keyword("ForkParentRunId")

PATCH_V2 = "agent-run-v2"
"""Patch id of the second workflow version: one deadline timer per run instead of one per step,
search attributes refreshed at most every ``SA_REFRESH_SECONDS`` within the loop, continue-as-new
at the spec's own thresholds, AgentStatus upserted after a chat message, compaction counting only
new messages. Histories recorded before it replay through the older branches (tests/histories/v1)."""
SA_REFRESH_SECONDS = 10.0
"""Least workflow time between two search-attribute refreshes within a turn loop (status changes
and the end of the run always upsert). Revision 2 only: see ``WORKFLOW_REV``."""
SA_REFRESH_TURNS = 5
"""Revision 3: TotalTokens and CostUsd are refreshed after every ``SA_REFRESH_TURNS``-th model step."""
WORKFLOW_REV = 3
"""Revision of this code's behaviour, recorded in each run's history: ``spec.resolve`` echoes it
into ``PinnedSpec.workflow_rev`` (0 in runs recorded before; they replay the revision-2 branches).
Revision 3 takes no decision that changes commands from a ``workflow.now()`` difference, and
refuses decisions for approval requests not yet in history. Why: sdk-core answers a query on a
worker without the run cached by applying events the run's next task has not started yet (an
activity's completion) at the *previous* task's time; the next task on that worker sends the
resulting commands, so that code saw another ``workflow.now()`` than replay does, and ran before
an update or signal that replay delivers in the same activation, first
(tests/histories/chaos/README.md)."""
MODEL_HEARTBEAT = timedelta(seconds=5)
TOOL_HEARTBEAT = timedelta(seconds=5)
PARSE_FAILURE_NOTE = (
    "Your last reply could not be read as a tool call. To call a tool, reply with exactly one JSON "
    'object {"name": <tool name>, "arguments": {...}} using one of the listed tools; otherwise answer '
    "in plain text."
)


class _Stop(Exception):
    """Ends the loop with a status (internal)."""

    def __init__(self, status: RunStatus, reason: str, error: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.error = error


@workflow.defn(name=WORKFLOW_NAME)
class AgentRun:
    """One agent run. Signals, update and queries are listed in CONTRACT.md."""

    @workflow.init
    def __init__(self, req: RunRequest) -> None:
        # live: the run's event stream (workflows/events.py), carried through continue-as-new
        self._events = RunEvents(req.carry.events if req.carry is not None else None)
        self._req: RunRequest | None = None
        self._pinned: PinnedSpec | None = None
        self._messages: list[dict[str, Any]] = []
        self._turn = 0
        self._usage = Usage()
        self._tool_calls: list[ToolCallRecord] = []
        self._decisions: list[Decision] = []
        self._ignored: list[IgnoredSignal] = []
        self._pending: dict[str, PendingApproval] = {}
        self._verdicts: dict[str, Decision] = {}
        self._inbox: list[MessageSignal] = []
        self._paused = False
        self._budget_paused = False
        self._interrupt: InterruptSignal | None = None
        self._status: str = "starting"
        self._signatures: list[Signature] = []
        self._waited_seconds = 0.0
        self._started_at = workflow.now()
        self._max_tokens_budget: int | None = None
        self._max_cost_budget: float | None = None
        self._compactions = 0
        self._continued = 0
        self._parse_failures = 0
        self._output: str | None = None
        self._use_search_attributes = False
        self._v2 = False
        self._v3 = False
        self._sa_upserted_at = workflow.now()
        self._seen: tuple[datetime, int] | None = None  # (time, history length) last seen
        self._outside_task = False  # this activation runs outside a workflow task (v3)
        self._unconfirmed: set[str] = set()  # approval requests made outside a workflow task
        self._parked: list[tuple[str, ApproveSignal | RejectSignal, datetime]] = []
        self._waits = 0  # person waits entered; the deadline is re-armed after one (v3)
        self._deadline_waits = 0
        self._deadline: asyncio.Future[None] | None = None
        self._deadline_waited = 0.0
        self._token_counts: list[int] = []  # exact tokens of self._messages[:len(...)] (v2)
        self._tools_tokens: int | None = None

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, req: RunRequest) -> RunResult:
        """Run the agent loop; returns :class:`RunResult` (never raises for business outcomes)."""
        self._req = req
        # One patch for every change since the first release: each patch costs every run a
        # marker event and a search-attribute upsert (the SDK records TemporalChangeVersion),
        # so later changes that runs in flight could see are gated together (README, replay).
        self._v2 = workflow.patched(PATCH_V2)
        self._use_search_attributes = (
            workflow.info().typed_search_attributes.get(SA_AGENT) is not None
        )
        try:
            if req.carry is not None:
                self._restore(req.carry)
            else:
                await self._start(req)
            result = await self._loop()
        except _Stop as stop:
            result = self._finish(stop.status, stop.reason, error=stop.error)
        except asyncio.CancelledError:
            result = self._finish("interrupted", "the workflow was cancelled")
        # live: released stream subscribers finish in this run (no command, replay-safe)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result

    async def _start(self, req: RunRequest) -> None:
        try:
            self._pinned = await workflow.execute_activity(
                SPEC_RESOLVE,
                ResolveSpecInput(
                    agent=req.agent, spec_file=req.spec_file, workflow_rev=WORKFLOW_REV
                ),
                result_type=PinnedSpec,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"spec: resolve agent {req.agent}",
            )
        except ActivityError as e:
            raise _Stop("failed", "invalid agent spec", error=_cause_message(e)) from None
        self._v3 = self._v2 and self._pinned.workflow_rev >= 3
        spec = self._pinned.spec
        if req.model:
            spec.model = req.model
        lim = req.limits
        if lim.max_turns is not None:
            spec.limits.max_turns = lim.max_turns
        if lim.max_seconds is not None:
            spec.limits.max_seconds = lim.max_seconds
        self._max_tokens_budget = lim.max_total_tokens or spec.limits.max_total_tokens
        self._max_cost_budget = lim.max_cost_usd or spec.limits.max_cost_usd
        if req.seed_messages:
            self._messages = [dict(m) for m in req.seed_messages]
        else:
            self._messages = [
                {"role": "system", "content": spec.system_prompt},
                {"role": "user", "content": req.input},
            ]
        self._status = "running"
        self._emit("run_started", agent=req.agent, input=req.input)
        self._upsert_search_attributes(initial=True)
        self._publish()

    def _restore(self, c: CarriedState) -> None:
        self._pinned = c.pinned
        self._v3 = self._v2 and c.pinned.workflow_rev >= 3
        self._messages = c.messages
        self._turn = c.turn
        self._usage = c.usage
        self._tool_calls = c.tool_calls
        self._decisions = c.decisions
        self._ignored = c.ignored_signals
        self._inbox = c.inbox
        self._paused = c.paused
        self._signatures = [tuple(tuple(p) for p in s) for s in c.signatures]  # type: ignore[misc]
        self._waited_seconds = c.waited_seconds
        self._started_at = c.started_at
        self._max_tokens_budget = c.max_total_tokens
        self._max_cost_budget = c.max_cost_usd
        self._compactions = c.compactions
        self._continued = c.continued_runs
        self._output = c.output
        self._status = "running"
        self._publish()

    async def _loop(self) -> RunResult:
        assert self._pinned is not None and self._req is not None
        spec = self._pinned.spec
        while True:
            await self._checkpoint()
            self._drain_inbox()
            if self._turn >= spec.limits.max_turns:
                raise _Stop("max_turns", f"reached max_turns={spec.limits.max_turns}")
            await self._maybe_compact()
            reply = await self._model_step()
            if reply is None:
                continue
            self._messages.append(reply.assistant_message())
            if reply.content:
                self._output = reply.content
            if not reply.tool_calls:
                self._publish()
                if self._req.mode == "chat":
                    await self._wait_for_message()
                    continue
                raise _Stop("completed", "the model answered")
            sig = turn_signature([(c.name, c.arguments) for c in reply.tool_calls])
            self._signatures.append(sig)
            loop = detect_loop(self._signatures, spec.limits.loop_window, spec.limits.loop_repeats)
            if loop:
                raise _Stop("loop_detected", loop)
            await self._run_tool_calls(reply.tool_calls)
            self._check_budget_after_step()
            await self._checkpoint()
            if self._should_continue_as_new():
                self._events.detach()  # live
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._continue_as_new()

    # ------------------------------------------------------------ model step

    async def _model_step(self) -> ModelReply | None:
        assert self._pinned is not None and self._req is not None
        spec = self._pinned.spec
        self._turn += 1
        self._status = "running"
        self._publish()
        inp = CallModelInput(
            run_id=workflow.info().workflow_id,
            turn=self._turn,
            model=spec.model,
            messages=self._messages,
            tools=[t.openai_schema() for t in self._pinned.tools],
            settings=ModelSettings(temperature=spec.temperature, max_tokens=spec.max_output_tokens),
            prompt_price_per_mtok=spec.pricing.prompt_per_mtok,
            completion_price_per_mtok=spec.pricing.completion_per_mtok,
            tenant_id=self._req.tenant_id,
        )
        self._emit("model_started", model=spec.model)
        try:
            reply = await self._race(
                lambda: workflow.execute_activity(
                    MODEL_COMPLETE,
                    inp,
                    result_type=ModelReply,
                    start_to_close_timeout=timedelta(seconds=spec.model_timeout_seconds),
                    heartbeat_timeout=MODEL_HEARTBEAT,
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(seconds=1),
                        backoff_coefficient=2.0,
                        maximum_interval=timedelta(seconds=30),
                        maximum_attempts=spec.model_max_attempts,
                    ),
                    summary=render.model_summary(spec.model, self._turn),
                )
            )
        except ActivityError as e:
            cause = e.cause
            if isinstance(cause, ApplicationError) and cause.type == ERR_MODEL_OUTPUT_INVALID:
                self._parse_failures += 1
                if self._parse_failures <= spec.max_parse_failures:
                    # Tell the model what went wrong and let it try again; the turn counts.
                    self._messages.append({"role": "user", "content": PARSE_FAILURE_NOTE})
                    workflow.logger.warning(
                        "model output unparsable; told the model", extra={"turn": self._turn}
                    )
                    return None
                raise _Stop(
                    "failed", "the model's output could not be parsed", error=_cause_message(e)
                ) from None
            raise _Stop("failed", "model step failed", error=_cause_message(e)) from None
        self._emit("model_finished", reply=reply)
        self._usage = self._usage.add(reply.usage)
        if self._v3:
            if self._turn % SA_REFRESH_TURNS == 0:
                self._upsert_search_attributes()
        elif self._v2:
            # TotalTokens and CostUsd stay current in listings to within SA_REFRESH_SECONDS; each
            # upsert is an event and a visibility write on the server, so not one every turn.
            since = (workflow.now() - self._sa_upserted_at).total_seconds()
            if since >= SA_REFRESH_SECONDS:
                self._upsert_search_attributes()
        elif workflow.patched("sa-per-turn"):
            self._upsert_search_attributes()
        return reply

    # ------------------------------------------------------------ tool calls

    async def _run_tool_calls(self, calls: list[ToolCallRequest]) -> None:
        assert self._pinned is not None and self._req is not None
        spec = self._pinned.spec
        tools = {t.name: t for t in self._pinned.tools}
        records: list[ToolCallRecord] = []
        outcomes: dict[str, str] = {}
        for call in calls:
            decision = evaluate(
                spec.policy,
                tools.get(call.name),
                call.name,
                call.arguments,
                self._req.tenant_id,
                self._req.principal_id,
            )
            args = parse_arguments(call.arguments)
            rec = ToolCallRecord(
                id=call.id,
                name=call.name,
                arguments=args if args is not None else call.arguments,
                status="pending",
                turn=self._turn,
                policy=decision.action,
                reason=decision.reason,
            )
            records.append(rec)
            self._tool_calls.append(rec)
            if decision.action == "deny":
                rec.status = "denied"
                outcomes[call.id] = (
                    f"Tool call denied by policy: {decision.reason}. Do not retry it."
                )
            elif decision.action == "approve":
                self._pending[call.id] = PendingApproval(
                    tool_call_id=call.id,
                    name=call.name,
                    arguments=rec.arguments,
                    requested_at=workflow.now().isoformat(),
                    turn=self._turn,
                    approvers=decision.approvers,
                    reason=decision.reason,
                )
                self._emit(
                    "approval_requested",
                    tool_call_id=call.id,
                    name=call.name,
                    arguments=rec.arguments,
                )
                if self._v3 and self._outside_task:
                    # the model's reply was applied outside a workflow task (a query on a
                    # worker without the run cached): not in history until the next task
                    self._unconfirmed.add(call.id)
        running: dict[str, asyncio.Task[ToolOutcome | str]] = {}
        for call, rec in zip(calls, records, strict=True):
            if rec.policy == "allow":
                running[call.id] = asyncio.ensure_future(
                    self._invoke(call, rec, tools.get(call.name))
                )
        if self._pending:
            self._settle()
            await self._await_approvals(records)
            for call, rec in zip(calls, records, strict=True):
                if rec.policy != "approve":
                    continue
                verdict = self._verdicts.get(call.id)
                if verdict and verdict.decision == "approve":
                    if verdict.arguments is not None:
                        rec.arguments = verdict.arguments
                    running[call.id] = asyncio.ensure_future(
                        self._invoke(call, rec, tools.get(call.name))
                    )
                elif verdict and verdict.decision == "timeout":
                    rec.status = "timed_out"
                    outcomes[call.id] = "No person approved this tool call in time; it was not run."
                else:
                    rec.status = "rejected"
                    why = verdict.comment if verdict and verdict.comment else "no reason given"
                    outcomes[call.id] = (
                        f"A person rejected this tool call; it was not run. Reason: {why}"
                    )
        if running:
            self._publish()
            try:
                results = await self._race(lambda: asyncio.gather(*running.values()))
            except _Stop:
                for call_id in running:
                    rec = next(r for r in records if r.id == call_id)
                    if rec.status in ("pending", "running"):
                        rec.status = "cancelled"
                raise
            for call_id, res in zip(running, results, strict=True):
                outcomes[call_id] = res if isinstance(res, str) else res.content
        for call in calls:
            self._messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": outcomes.get(call.id, "")}
            )
        self._publish()

    async def _invoke(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo | None
    ) -> ToolOutcome | str:
        # live: tool_started / tool_finished around the tool activity
        self._emit("tool_started", tool_call_id=call.id, name=call.name, arguments=rec.arguments)
        out = await self._invoke_activity(call, rec, info)
        self._emit(
            "tool_finished",
            tool_call_id=call.id,
            name=call.name,
            arguments=rec.arguments,
            status=rec.status,
            duration_ms=rec.duration_ms,
            result=out.content if isinstance(out, ToolOutcome) else out,
        )
        return out

    async def _invoke_activity(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo | None
    ) -> ToolOutcome | str:
        assert self._pinned is not None and self._req is not None
        spec = self._pinned.spec
        rec.status = "running"
        arguments: str | dict[str, Any] = (
            rec.arguments if isinstance(rec.arguments, dict) else call.arguments
        )
        timeout = info.timeout_seconds if info else 30.0
        attempts = info.max_attempts if info else 1
        try:
            out = await workflow.execute_activity(
                TOOL_INVOKE,
                InvokeToolInput(
                    run_id=workflow.info().workflow_id,
                    turn=self._turn,
                    call_id=call.id,
                    name=call.name,
                    arguments=arguments,
                    workspace=spec.workspace,
                    max_output_chars=spec.max_tool_output_chars,
                    tenant_id=self._req.tenant_id,
                    principal_id=self._req.principal_id,
                    secrets=spec.secrets,
                    mcp=info.mcp if info else None,
                ),
                result_type=ToolOutcome,
                task_queue=info.task_queue if info else None,
                start_to_close_timeout=timedelta(seconds=timeout),
                heartbeat_timeout=TOOL_HEARTBEAT,
                retry_policy=RetryPolicy(
                    maximum_attempts=attempts, initial_interval=timedelta(seconds=1)
                ),
                summary=render.tool_summary(
                    call.name,
                    arguments
                    if isinstance(arguments, dict)
                    else parse_arguments(arguments) or arguments,
                ),
            )
        except ActivityError as e:
            msg = _cause_message(e)
            if isinstance(e.cause, CancelledError):  # interrupt, max_seconds or cancellation
                rec.status = "cancelled"
                rec.reason = msg
                return f"The tool call was cancelled: {msg}"
            rec.status = (
                "timed_out" if "timeout" in msg.lower() or "timed out" in msg.lower() else "error"
            )
            rec.reason = msg
            return f"The tool failed and was given up after {attempts} attempt(s): {msg}"
        rec.status = out.status
        rec.duration_ms = out.duration_ms
        rec.result_chars = out.output_chars
        if out.arguments is not None:
            rec.arguments = out.arguments
        return out

    async def _await_approvals(self, records: list[ToolCallRecord]) -> None:
        assert self._pinned is not None
        policy = self._pinned.spec.policy
        self._status = "awaiting_approval"
        self._upsert_search_attributes()
        self._publish()
        waiting = list(self._pending)
        started = workflow.now()
        try:
            await self._wait_for_person(
                lambda: all(cid in self._verdicts for cid in waiting),
                policy.approval_timeout_seconds,
                f"approval of {', '.join(self._pending[c].name for c in waiting)}",
            )
        except TimeoutError:
            self._waited_seconds += (workflow.now() - started).total_seconds()
            if policy.on_approval_timeout == "fail":
                self._pending.clear()
                raise _Stop("failed", "approval timed out") from None
            for cid in waiting:
                if cid not in self._verdicts:
                    d = Decision(
                        tool_call_id=cid,
                        decision="timeout",
                        principal_id="system",
                        at=workflow.now().isoformat(),
                        via="timer",
                    )
                    self._verdicts[cid] = d
                    self._decisions.append(d)
                    p = self._pending[cid]
                    self._emit(
                        "approval_decided",
                        tool_call_id=cid,
                        name=p.name,
                        arguments=p.arguments,
                        decision="timeout",
                        principal_id="system",
                    )
        else:
            self._waited_seconds += (workflow.now() - started).total_seconds()
        for cid in waiting:
            self._pending.pop(cid, None)
        self._status = "running"
        self._upsert_search_attributes()

    # ------------------------------------------------------------ people

    async def _wait_for_person(
        self, done: Callable[[], bool], timeout: float | None, what: str = "a person"
    ) -> None:
        """Wait (durably) until ``done()`` or an interrupt; raises asyncio.TimeoutError on timeout.

        ``what`` names the wait in the timer's summary (Web UI timeline).
        """
        self._waits += 1
        await workflow.wait_condition(
            lambda: self._settle() or done() or self._interrupt is not None,
            timeout=timeout,
            timeout_summary=f"waiting for {what} (timeout)" if timeout is not None else None,
        )
        if self._interrupt is not None:
            raise _Stop("interrupted", self._interrupt.reason)

    async def _checkpoint(self) -> None:
        """A safe point: honour interrupt, pause, and the run's deadline."""
        self._settle()
        if self._interrupt is not None:
            raise _Stop("interrupted", self._interrupt.reason)
        if self._paused:
            before, self._status = (
                self._status,
                ("budget_paused" if self._budget_paused else "paused"),
            )
            self._upsert_search_attributes()
            self._publish()
            started = workflow.now()
            await self._wait_for_person(lambda: not self._paused, None)
            self._waited_seconds += (workflow.now() - started).total_seconds()
            self._status = before if before not in ("paused", "budget_paused") else "running"
            self._upsert_search_attributes()
        if self._v3:
            # only the deadline timer (an event in history) ends the run on time
            if self._deadline is not None and self._deadline.done():
                if self._deadline_waits == self._waits:
                    raise _Stop("timeout", "reached max_seconds")
        elif self._remaining_seconds() <= 0:
            raise _Stop("timeout", "reached max_seconds")

    async def _wait_for_message(self) -> None:
        assert self._pinned is not None
        self._status = "waiting_for_message"
        self._upsert_search_attributes()
        self._publish()
        started = workflow.now()
        try:
            await self._wait_for_person(
                lambda: bool(self._inbox),
                self._pinned.spec.idle_timeout_seconds,
                "the next message",
            )
        except TimeoutError:
            raise _Stop("completed", "conversation idle timeout") from None
        self._waited_seconds += (workflow.now() - started).total_seconds()
        self._status = "running"
        if self._v2 or workflow.patched("agent-status-after-message"):
            self._upsert_search_attributes()

    def _drain_inbox(self) -> None:
        while self._inbox:
            m = self._inbox.pop(0)
            self._messages.append({"role": "user", "content": m.content})

    def _remaining_seconds(self) -> float:
        assert self._pinned is not None
        elapsed = (workflow.now() - self._started_at).total_seconds() - self._waited_seconds
        return self._pinned.spec.limits.max_seconds - elapsed

    async def _race(self, make: Callable[[], Awaitable[T]]) -> T:
        """Await ``make()`` unless an interrupt or the deadline comes first (then cancel it)."""
        if self._v2:
            return await self._race_deadline(make)
        task: asyncio.Future[T] = asyncio.ensure_future(make())
        remaining = self._remaining_seconds()
        try:
            await workflow.wait_condition(
                lambda: task.done() or self._interrupt is not None, timeout=max(remaining, 0.001)
            )
        except TimeoutError:
            await _cancel(task)
            raise _Stop("timeout", "reached max_seconds") from None
        if not task.done():
            await _cancel(task)
            assert self._interrupt is not None
            raise _Stop("interrupted", self._interrupt.reason)
        return task.result()

    def _deadline_timer(self) -> asyncio.Future[None]:
        """The one timer of ``max_seconds``, re-armed only when time waiting for a person moved it.

        One durable timer for the run instead of one per step: each timer is two events and a
        server task, and almost every step ends long before the deadline.
        """
        moved = (
            self._deadline_waits != self._waits
            if self._v3
            else self._deadline_waited != self._waited_seconds
        )
        if self._deadline is None or moved:
            if self._deadline is not None and not self._deadline.done():
                self._deadline.cancel()
            self._deadline_waited = self._waited_seconds
            self._deadline_waits = self._waits
            self._deadline = asyncio.ensure_future(
                workflow.sleep(
                    max(self._remaining_seconds(), 0.001),
                    summary=f"deadline: max_seconds={self._pinned.spec.limits.max_seconds:g}"
                    if self._pinned
                    else "deadline",
                )
            )
        return self._deadline

    async def _race_deadline(self, make: Callable[[], Awaitable[T]]) -> T:
        deadline = self._deadline_timer()
        task: asyncio.Future[T] = asyncio.ensure_future(make())
        await workflow.wait_condition(
            lambda: self._observe() or task.done() or self._interrupt is not None or deadline.done()
        )
        if task.done():
            return task.result()
        await _cancel(task)
        if self._interrupt is not None:
            raise _Stop("interrupted", self._interrupt.reason)
        raise _Stop("timeout", "reached max_seconds")

    # ------------------------------------------------------------ budgets

    def _check_budget_after_step(self) -> None:
        over = self._budget_exceeded()
        if over is None:
            return
        assert self._pinned is not None
        if self._pinned.spec.limits.on_budget == "pause":
            self._paused = True
            self._budget_paused = True
            workflow.logger.info("budget reached; pausing", extra={"why": over})
            return
        raise _Stop("budget_exceeded", over)

    def _budget_exceeded(self) -> str | None:
        if (
            self._max_tokens_budget is not None
            and self._usage.total_tokens >= self._max_tokens_budget
        ):
            return (
                f"used {self._usage.total_tokens} tokens of a budget of {self._max_tokens_budget}"
            )
        if self._max_cost_budget is not None and self._usage.cost_usd >= self._max_cost_budget:
            return f"cost {self._usage.cost_usd:.6f} USD of a budget of {self._max_cost_budget} USD"
        return None

    # ------------------------------------------------------------ compaction

    async def _maybe_compact(self) -> None:
        assert self._pinned is not None
        if self._v2:
            return await self._maybe_compact_counted()
        comp = self._pinned.spec.compaction
        usable = comp.context_window - comp.output_reserve
        estimate = (
            sum(
                len(str(m.get("content") or "")) + len(str(m.get("tool_calls") or ""))
                for m in self._messages
            )
            / 3
        )
        if estimate < comp.threshold * usable * 0.9:
            return
        await self._compact(await self._count_and_plan([], None))

    async def _maybe_compact_counted(self) -> None:
        """Compact if needed, counting only messages not counted before (patch v2).

        Exact counts of the transcript's prefix are kept (messages are only appended between
        compactions); the messages after it are bounded with :func:`token_upper_bound`. While that
        bound stays under the budget no activity runs; otherwise ``tokens.count`` counts just the
        new messages, so a long run neither counts its whole transcript every turn nor stores
        that count in its history.
        """
        assert self._pinned is not None
        comp = self._pinned.spec.compaction
        budget = comp.threshold * (comp.context_window - comp.output_reserve)
        new = self._messages[len(self._token_counts) :]
        tools_tokens = self._tools_tokens
        if tools_tokens is None:
            tools_tokens = sum(token_upper_bound(t.openai_schema()) for t in self._pinned.tools)
        bound = sum(self._token_counts) + tools_tokens + sum(token_upper_bound(m) for m in new)
        if bound <= budget:
            return
        await self._compact(await self._count_and_plan(self._token_counts, self._tools_tokens))

    async def _count_and_plan(
        self, known: list[int], tools_known: int | None
    ) -> CompactionPlan | None:
        """Count what is not counted yet with ``tokens.count`` and plan a compaction.

        ``known`` holds the exact tokens of the first ``len(known)`` messages, ``tools_known``
        those of the tool schemas (None: count them too). The counts are kept in
        ``_token_counts`` / ``_tools_tokens``. Returns None when no compaction is needed, or when
        the counts do not fit the transcript (logged: a plain exception here would retry the
        workflow task forever).
        """
        assert self._pinned is not None
        comp = self._pinned.spec.compaction
        new = self._messages[len(known) :]
        counts = await workflow.execute_activity(
            TOKENS_COUNT,
            CountTokensInput(
                model=self._pinned.spec.model,
                encoding=comp.encoding,
                messages=new,
                tools=[t.openai_schema() for t in self._pinned.tools]
                if tools_known is None
                else [],
            ),
            result_type=TokenCounts,
            start_to_close_timeout=timedelta(seconds=60),
            summary=f"tokens: count {len(new)} new messages of {len(self._messages)}",
        )
        self._token_counts = known + counts.per_message
        self._tools_tokens = counts.tools if tools_known is None else tools_known
        try:
            return plan_compaction(
                self._messages,
                self._token_counts,
                self._tools_tokens,
                comp.context_window,
                comp.output_reserve,
                comp.threshold,
            )
        except ValueError as e:
            workflow.logger.warning("compaction skipped", extra={"error": str(e)})
            return None

    async def _compact(self, plan: CompactionPlan | None) -> None:
        """Carry out a compaction plan (None: nothing to do)."""
        assert self._pinned is not None
        comp = self._pinned.spec.compaction
        if plan is None:
            return
        summary: str | None = None
        if comp.summarize and plan.dropped:
            summary = await self._summarize([self._messages[i] for i in plan.dropped])
        compacted = plan.apply(self._messages, summary=summary)
        if not plan.fits:
            # even the messages that must stay are too long: shorten tool results to fit
            budget_chars = int(plan.target * 3)
            compacted = truncate_tool_results(
                compacted, max(500, budget_chars // max(1, len(compacted)))
            )
        self._messages = compacted
        self._token_counts = []  # the transcript was rewritten: count it afresh next time
        self._compactions += 1
        workflow.logger.info(
            "context compacted",
            extra={
                "dropped": len(plan.dropped),
                "before": plan.tokens_before,
                "after": plan.tokens_after,
                "fits": plan.fits,
            },
        )

    async def _summarize(self, dropped: list[dict[str, Any]]) -> str | None:
        """A model step of its own that summarises the dropped messages (None if it fails)."""
        assert self._pinned is not None and self._req is not None
        spec = self._pinned.spec
        # live: the summary is a model step of the stream too (its text deltas are bracketed)
        self._emit("model_started", model=spec.model, purpose="summary")
        try:
            reply = await workflow.execute_activity(
                MODEL_COMPLETE,
                CallModelInput(
                    run_id=workflow.info().workflow_id,
                    turn=self._turn,
                    model=spec.model,
                    messages=summary_request(dropped),
                    settings=ModelSettings(temperature=0.0, max_tokens=400),
                    prompt_price_per_mtok=spec.pricing.prompt_per_mtok,
                    completion_price_per_mtok=spec.pricing.completion_per_mtok,
                    tenant_id=self._req.tenant_id,
                ),
                result_type=ModelReply,
                start_to_close_timeout=timedelta(seconds=spec.model_timeout_seconds),
                heartbeat_timeout=MODEL_HEARTBEAT,
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=render.model_summary(
                    spec.model, self._turn, "(summary of dropped context)"
                ),
            )
        except ActivityError:
            self._emit("model_finished", reply=ModelReply(model=spec.model))
            return None
        self._emit("model_finished", reply=reply)
        self._usage = self._usage.add(reply.usage)
        return reply.content

    # ------------------------------------------------------------ continue-as-new

    def _should_continue_as_new(self) -> bool:
        assert self._pinned is not None
        lim = self._pinned.spec.limits
        every = lim.continue_as_new_every_turns
        if every and self._turn > 0 and self._turn % every == 0:
            return True
        info = workflow.info()
        if info.is_continue_as_new_suggested():
            return True
        if self._v2 or workflow.patched("can-at-own-thresholds"):
            # Before Temporal's 4 MiB suggestion: a turn may add hundreds of KB, and a smaller
            # history also replays faster when a worker restarts.
            return (
                info.get_current_history_size() >= lim.continue_as_new_at_bytes
                or info.get_current_history_length() >= lim.continue_as_new_at_events
            )
        return False

    def _continue_as_new(self) -> None:
        assert self._req is not None and self._pinned is not None
        self._drop_parked()
        carry = CarriedState(
            pinned=self._pinned,
            messages=self._messages,
            turn=self._turn,
            usage=self._usage,
            tool_calls=self._tool_calls,
            decisions=self._decisions,
            ignored_signals=self._ignored,
            inbox=self._inbox,
            paused=self._paused,
            signatures=[list(list(p) for p in s) for s in self._signatures],
            waited_seconds=self._waited_seconds,
            started_at=self._started_at,
            max_total_tokens=self._max_tokens_budget,
            max_cost_usd=self._max_cost_budget,
            compactions=self._compactions,
            continued_runs=self._continued + 1,
            output=self._output,
            events=self._events.carry(),  # live
        )
        workflow.continue_as_new(self._req.model_copy(update={"carry": carry}))

    # ------------------------------------------------------------ finishing

    def _finish(self, status: RunStatus, reason: str, error: str | None = None) -> RunResult:
        for rec in self._tool_calls:
            if rec.status in ("pending", "running"):
                rec.status = "cancelled"
        self._pending.clear()
        self._drop_parked()
        self._status = status
        self._upsert_search_attributes()
        self._publish()
        duration = (workflow.now() - self._started_at).total_seconds() * 1000
        result = RunResult(
            status=status,
            output=self._output,
            turns=self._turn,
            usage=self._usage,
            tool_calls=self._tool_calls,
            duration_ms=round(duration, 1),
            stopped_reason=reason,
            agent=self._req.agent if self._req else "",
            spec_hash=self._pinned.spec_hash if self._pinned else "",
            error=error,
            decisions=self._decisions,
            ignored_signals=self._ignored,
            parent_run_id=self._req.parent_run_id if self._req else None,
            fork_turn=self._req.fork_turn if self._req else None,
        )
        self._emit("run_finished", result=result)  # live
        return result

    def _emit(self, type: str, **fields: Any) -> None:
        """live: one event of the run's stream (CONTRACT.md "Event stream"); no command."""
        if type == "status":
            self._events.status(self._turn, fields["status"])
        elif type == "model_finished":
            reply: ModelReply = fields["reply"]
            self._events.model_finished(
                self._turn,
                reply.model,
                reply.usage.model_dump(),
                reply.content,
                reply.streamed_chars,
            )
        elif type == "run_finished":
            self._events.finish(self._turn, fields["result"].model_dump(mode="json"))
        else:
            self._events.emit(type, self._turn, **fields)

    def _publish(self) -> None:
        self._emit("status", status=self._status)  # live
        if self._pinned is None:
            return
        spec = self._pinned.spec
        workflow.set_current_details(
            render.current_details(
                status=self._status,
                turn=self._turn,
                max_turns=spec.limits.max_turns,
                model=spec.model,
                total_tokens=self._usage.total_tokens,
                cost_usd=self._usage.cost_usd,
                pending=list(self._pending.values()),
                tool_calls=self._tool_calls,
                last_text=self._output,
                spec_hash=self._pinned.spec_hash,
            )
        )

    def _upsert_search_attributes(self, initial: bool = False) -> None:
        if not self._use_search_attributes or self._req is None:
            return
        pairs: list[SearchAttributePair[Any]] = [
            SA_STATUS.value_set(self._status),
            SA_TOKENS.value_set(self._usage.total_tokens),
            SA_COST.value_set(self._usage.cost_usd),
        ]
        if initial and self._pinned is not None:
            pairs += [
                SA_AGENT.value_set(self._req.agent),
                SA_TENANT.value_set(self._req.tenant_id),
                SA_PRINCIPAL.value_set(self._req.principal_id),
                SA_SPEC.value_set(self._pinned.spec_hash),
            ]
            if self._req.parent_run_id:
                pairs.append(SA_PARENT.value_set(self._req.parent_run_id))
        workflow.upsert_search_attributes(pairs)
        self._sa_upserted_at = workflow.now()

    # ------------------------------------------------------------ handlers

    def _ignore(
        self, signal: str, principal_id: str, reason: str, tool_call_id: str | None = None
    ) -> None:
        self._ignored.append(
            IgnoredSignal(
                signal=signal,
                principal_id=principal_id,
                at=workflow.now().isoformat(),
                reason=reason,
                tool_call_id=tool_call_id,
            )
        )
        workflow.logger.info("signal ignored", extra={"signal": signal, "why": reason})

    def _decision_problem(self, tool_call_id: str, principal_id: str) -> str | None:
        """Why a decision for this call cannot be taken now, or None when it can."""
        if tool_call_id in self._verdicts:
            return f"tool call {tool_call_id} was already decided ({self._verdicts[tool_call_id].decision})"
        pending = self._pending.get(tool_call_id)
        if pending is None:
            known = any(r.id == tool_call_id for r in self._tool_calls)
            return (
                f"tool call {tool_call_id} is {'not waiting for approval' if known else 'unknown'}"
            )
        assert self._pinned is not None
        allowed, why = may_decide(self._pinned.spec.policy, pending.approvers, principal_id)
        return None if allowed else why

    def _record(
        self,
        tool_call_id: str,
        decision: str,
        principal_id: str,
        arguments: dict[str, Any] | None,
        comment: str | None,
        via: str,
    ) -> None:
        d = Decision(
            tool_call_id=tool_call_id,
            decision=decision,  # type: ignore[arg-type]
            principal_id=principal_id,
            at=workflow.now().isoformat(),
            arguments=arguments,
            comment=comment,
            via=via,  # type: ignore[arg-type]
        )
        self._verdicts[tool_call_id] = d
        self._decisions.append(d)
        pending = self._pending.get(tool_call_id)
        self._emit(
            "approval_decided",
            tool_call_id=tool_call_id,
            name=pending.name if pending else "",
            arguments=arguments
            if arguments is not None
            else (pending.arguments if pending else {}),
            decision=decision,
            principal_id=principal_id,
        )
        for rec in self._tool_calls:
            if rec.id == tool_call_id:
                rec.decided_by = principal_id

    @workflow.signal(name="approve")
    def approve(self, sig: ApproveSignal) -> None:
        """Approve a waiting tool call (optionally with edited arguments)."""
        if not self._park(sig):
            self._signal_decision(sig)

    @workflow.signal(name="reject")
    def reject(self, sig: RejectSignal) -> None:
        """Reject a waiting tool call; the model is told why."""
        if not self._park(sig):
            self._signal_decision(sig)

    def _signal_decision(self, sig: ApproveSignal | RejectSignal) -> None:
        name = "approve" if isinstance(sig, ApproveSignal) else "reject"
        problem = self._decision_problem(sig.tool_call_id, sig.principal_id)
        if problem:
            self._ignore(name, sig.principal_id, problem, sig.tool_call_id)
        elif isinstance(sig, ApproveSignal):
            self._record(
                sig.tool_call_id, "approve", sig.principal_id, sig.arguments, sig.comment, "signal"
            )
        else:
            self._record(sig.tool_call_id, "reject", sig.principal_id, None, sig.reason, "signal")

    def _park(self, sig: ApproveSignal | RejectSignal) -> bool:
        """Hold a decision whose call is not (yet) pending in history (v3); True if held.

        The same workflow task may bring the signal and the model reply that asks for the
        approval, in either order (live vs replay): a signal for an unknown call is held until
        time moves on, one for a request made outside a workflow task until it is confirmed.
        """
        cid = sig.tool_call_id
        known = cid in self._verdicts or any(r.id == cid for r in self._tool_calls)
        if not self._v3 or (known and cid not in self._unconfirmed):
            return False
        self._parked.append((cid, sig, workflow.now()))
        return True

    def _drop_parked(self) -> None:
        """No call waits any more: each held signal is ignored, with why."""
        held, self._parked = self._parked, []
        for _, sig, _ in held:
            self._signal_decision(sig)

    def _held_as_ignored(self) -> list[IgnoredSignal]:
        """Held signals for unknown calls, as the ``state`` query shows them (ignored, with why)."""
        return [
            IgnoredSignal(
                signal="approve" if isinstance(sig, ApproveSignal) else "reject",
                principal_id=sig.principal_id,
                at=at.isoformat(),
                reason=self._decision_problem(cid, sig.principal_id) or "held",
                tool_call_id=cid,
            )
            for cid, sig, at in self._parked
            if cid not in self._unconfirmed
        ]

    def _observe(self) -> bool:
        """Note whether this activation runs outside a workflow task; returns False.

        Called from wait conditions (evaluated in every activation). Each workflow task has a
        later time than the one before; an activation sdk-core makes to answer a query on a
        worker without the run cached, applying events whose task has not started, keeps the
        last task's time with a longer history. Only what is not a command depends on it.
        """
        seen = (workflow.now(), workflow.info().get_current_history_length())
        if self._seen is None or seen[0] != self._seen[0]:
            self._outside_task = False
        elif seen[1] != self._seen[1]:
            self._outside_task = True
        self._seen = seen
        return False

    def _settle(self) -> bool:
        """Confirm requests made outside a task once time moved; apply or drop held signals.

        Called where the run waits for a person (from the wait's condition); returns False.
        """
        self._observe()
        now = workflow.now()
        if not self._outside_task:
            self._unconfirmed.clear()
        held, self._parked = self._parked, []
        for cid, sig, at in held:
            if cid in self._pending and cid not in self._unconfirmed:
                self._signal_decision(sig)
            elif at == now or cid in self._unconfirmed:
                self._parked.append((cid, sig, at))
            else:
                self._signal_decision(sig)  # unknown still: ignored with the reason
        return False

    @workflow.update(name="decide")
    def decide(self, upd: DecideUpdate) -> DecideResult:
        """Approve or reject a waiting tool call, synchronously."""
        self._record(
            upd.tool_call_id,
            upd.decision,
            upd.principal_id,
            upd.arguments if upd.decision == "approve" else None,
            upd.comment if upd.decision == "approve" else (upd.reason or upd.comment),
            "update",
        )
        return DecideResult(tool_call_id=upd.tool_call_id, decision=upd.decision)

    @decide.validator
    def _validate_decide(self, upd: DecideUpdate) -> None:
        if upd.tool_call_id in self._unconfirmed:
            raise ValueError(
                f"tool call {upd.tool_call_id} is not recorded in the run's history yet; retry"
            )
        problem = self._decision_problem(upd.tool_call_id, upd.principal_id)
        if problem:
            raise ValueError(problem)

    @workflow.signal(name="interrupt")
    def interrupt(self, sig: InterruptSignal) -> None:
        """Stop at the next safe point; in-flight activities are cancelled."""
        if self._interrupt is None:
            self._interrupt = sig
        else:
            self._ignore("interrupt", sig.principal_id, "already interrupted")

    @workflow.signal(name="pause")
    def pause(self, sig: PrincipalSignal) -> None:
        """Hold the run before its next step."""
        if self._paused:
            self._ignore("pause", sig.principal_id, "already paused")
        self._paused = True

    @workflow.signal(name="resume")
    def resume(self, sig: PrincipalSignal) -> None:
        """Let a paused run go on."""
        if not self._paused:
            self._ignore("resume", sig.principal_id, "not paused")
        elif self._budget_paused and self._budget_exceeded() is not None:
            self._ignore("resume", sig.principal_id, "over budget: raise it with raise_budget")
            return
        self._paused = False
        self._budget_paused = False

    @workflow.signal(name="send_message")
    def send_message(self, sig: MessageSignal) -> None:
        """Add a user message: steering mid-run, or the next turn of a conversation."""
        self._inbox.append(sig)

    @workflow.signal(name="raise_budget")
    def raise_budget(self, sig: RaiseBudgetSignal) -> None:
        """Set new budget totals; a run paused on its budget goes on if now under it."""
        if sig.max_total_tokens is not None:
            self._max_tokens_budget = sig.max_total_tokens
        if sig.max_cost_usd is not None:
            self._max_cost_budget = sig.max_cost_usd
        if self._budget_paused and self._budget_exceeded() is None:
            self._paused = False
            self._budget_paused = False

    @workflow.query(name="state")
    def state(self) -> RunState:
        """The run's live state (CONTRACT.md)."""
        return RunState(
            status=self._status,  # type: ignore[arg-type]
            turn=self._turn,
            agent=self._req.agent if self._req else "",
            pending_approvals=list(self._pending.values()),
            usage=self._usage,
            tool_calls=self._tool_calls,
            ignored_signals=self._ignored + self._held_as_ignored(),
            decisions=self._decisions,
            paused=self._paused,
            spec_hash=self._pinned.spec_hash if self._pinned else "",
            tenant_id=self._req.tenant_id if self._req else "default",
            principal_id=self._req.principal_id if self._req else "anonymous",
            compactions=self._compactions,
            continued_runs=self._continued,
            parent_run_id=self._req.parent_run_id if self._req else None,
            fork_turn=self._req.fork_turn if self._req else None,
            output=self._output,
        )

    @workflow.query(name="transcript")
    def transcript(self) -> list[dict[str, Any]]:
        """The messages so far, OpenAI chat format."""
        return self._messages


async def _cancel(task: asyncio.Future[Any]) -> None:
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, CancelledError, ActivityError):
        pass


def _cause_message(e: ActivityError) -> str:
    cause: BaseException | None = e.cause
    parts = []
    while cause is not None:
        parts.append(str(cause))
        cause = getattr(cause, "cause", None)
    return ": ".join(p for p in parts if p) or str(e)
