"""The tool step: one turn's tool calls carried out (policy, approvals, activities, results).

:class:`ToolStep` works on the run's :class:`workflows.run_context.RunContext`. How each call
settles (denied, approved, rejected, timed out, failed, cancelled) and the text the model is told
come from :mod:`workflows.turn`. Each call that may run goes to its runner
(:mod:`workflows.tool_runners`: an activity, a local activity, an MCP server's or sandboxed
tool, a child run, a handoff, a client tool, a Code Mode script, a replay's recorded result),
and :meth:`ToolStep.settle` records how it ended. Results go back into the transcript in the
order the model wrote the calls.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.approvals as approvals
    import workflows.charges as charges
    import workflows.transcript as transcript
    import workflows.turn as turn
    from activities.contracts import ToolCallRequest, ToolInfo, ToolOutcome
    from activities.interfaces import policy_judge
    from activities.judge import JudgeVerdict
    from activities.rules import failed_status, tool_finished_fields
    from workflows.approvals import Decisions
    from workflows.children import ChildStep
    from workflows.client_tools import ClientTools
    from workflows.handoff import HandoffStep
    from workflows.models import PendingApproval, ToolCallRecord
    from workflows.policy import CedarFacts, Search, decide, re2_search, re_search
    from workflows.run_context import RunContext, Stop, cause_message
    from workflows.tool_runners import Ran, Runners

if TYPE_CHECKING:
    from workflows.guardrails import GuardrailStep

__all__ = ["Stop", "ToolStep", "cause_message"]


class ToolStep:
    """Carries out tool calls for one run."""

    def __init__(
        self,
        ctx: RunContext,
        children: ChildStep,
        handoffs: HandoffStep,
        decisions: Decisions,
        guard: GuardrailStep | None = None,
        client: ClientTools | None = None,
    ) -> None:
        """Work on ``ctx``; ``ask_*`` calls go to ``children``, ``handoff_to_*`` to ``handoffs``.

        ``decisions`` records an approval that timed out; ``guard`` what results tripped;
        ``client`` waits for the results of tools the client runs (workflows/client_tools.py).
        """
        self.ctx = ctx
        self.guard = guard
        self.client = client or ClientTools(ctx)
        self._decisions = decisions
        self._children = children
        self.runners = Runners(ctx, self, children, handoffs, self.client)

    async def run(self, calls: list[ToolCallRequest]) -> None:
        """Carry out a turn's calls and append one ``tool`` message per call, in call order.

        Raises:
            Stop: interrupted, out of time, or approvals timed out with ``on_approval_timeout: fail``.
        """
        tools = {t.name: t for t in self.ctx.pinned().tools}
        self.runners.child.share = sum(
            1 for c in calls if c.name in tools and tools[c.name].kind == "subagent"
        )
        _, outcomes = await self.execute(calls)
        for call in calls:
            transcript.add(
                self.ctx.s,
                {"role": "tool", "tool_call_id": call.id, "content": outcomes.get(call.id, "")},
            )
        self.ctx.publish()

    async def execute(
        self, calls: list[ToolCallRequest]
    ) -> tuple[list[ToolCallRecord], dict[str, str]]:
        """Carry the calls out: the policy's verdicts, then concurrently their runners.

        Allowed calls start at once; calls that ask a person start when approved (after the judge,
        if the spec has one, and the wait for approvals).

        Returns their records (in order) and each call's result text by id. Used for a turn's
        calls and for the calls a Code Mode script makes (workflows/code_mode.py).
        """
        ctx = self.ctx
        tools = {t.name: t for t in ctx.pinned().tools}
        if self.runners.client.supported is None and any(
            (t := tools.get(c.name)) is not None and t.kind == "client" for c in calls
        ):  # before any command of these calls (a marker after a local activity fails replay)
            self.runners.client.supported = ctx.versions.client_tools()
        records, outcomes = self.apply_policy(calls, tools)
        running: dict[str, asyncio.Future[str]] = {}
        for call, rec in zip(calls, records, strict=True):
            if rec.policy == "allow":
                running[call.id] = asyncio.ensure_future(
                    self.invoke(call, rec, tools.get(call.name))
                )
        if ctx.s.approvals.pending:
            if await self._judge(calls, records, tools):
                for cid in list(ctx.s.approvals.pending):  # the judge decided every one: no wait
                    approvals.answered(ctx.s, cid)
            else:
                ctx.release_parked()
                await self._await_approvals()
            for call, rec in zip(calls, records, strict=True):
                if rec.policy != "approve":
                    continue
                verdict = ctx.s.approvals.verdicts.get(call.id)
                settled = turn.settle_by_verdict(verdict)
                if settled is None and verdict is not None:
                    if verdict.arguments is not None:
                        self.ran_with(rec, verdict.arguments)
                    running[call.id] = asyncio.ensure_future(
                        self.invoke(call, rec, tools.get(call.name))
                    )
                elif settled is not None:  # rejected, or its approval timed out: not run
                    outcomes[call.id] = self.settle(rec, settled, None, announce=False)
        if running:
            # tool calls (their activities' timeouts bound them) and handoffs (noted at once);
            # a child run or a Code Mode script races the deadline timer (RunContext.race)
            bounded = all(
                (info := tools.get(r.name)) is None or info.kind in ("tool", "handoff")
                for r in records
                if r.id in running
            )
            await self.gather(running, records, outcomes, bounded)
        return records, outcomes

    def policy_search(self) -> Search:
        """The engine of the policy's patterns: RE2 if the run takes patch ``policy-re2``.

        Else ``re``. Asked at the first pattern matched, so a run whose policy matches no pattern
        records no marker (no event, no ``TemporalChangeVersion`` upsert).
        """
        versions = self.ctx.versions

        def search(pattern: str, text: str) -> bool:
            engine = re2_search if versions.policy_re2() else re_search
            return engine(pattern, text)

        return search

    def apply_policy(
        self, calls: list[ToolCallRequest], tools: dict[str, ToolInfo]
    ) -> tuple[list[ToolCallRecord], dict[str, str]]:
        """Records of the calls as the policy leaves them (added to the run's); denied ones' texts."""
        ctx = self.ctx
        s, spec = ctx.s, ctx.pinned().spec
        records: list[ToolCallRecord] = []
        outcomes: dict[str, str] = {}
        search = self.policy_search()
        facts = self.cedar_facts()
        for call in calls:
            decision = decide(
                spec.policy, tools.get(call.name), call.id, call.name, call.arguments, facts, search
            )
            rec, settled = turn.settle_by_policy(call, decision, s.turn)
            rec.policy_id = decision.policy_id
            records.append(rec)
            s.tool_calls.append(rec)
            if settled is not None:  # denied: not run
                outcomes[call.id] = self.settle(rec, settled, None, announce=False)
            elif decision.action == "approve":
                approvals.ask(
                    s,
                    PendingApproval(
                        tool_call_id=call.id,
                        name=call.name,
                        arguments=rec.arguments,
                        requested_at=workflow.now().isoformat(),
                        turn=s.turn,
                        approvers=decision.approvers,
                        reason=decision.reason,
                    ),
                )
                if ctx.versions.park_early_decisions and ctx.outside_task:
                    # the model's reply was applied outside a workflow task (a query on a
                    # worker without the run cached): not in history until the next task
                    approvals.unconfirmed(s, call.id)
                ctx.emit(
                    "approval_requested",
                    tool_call_id=call.id,
                    name=call.name,
                    arguments=rec.arguments,
                )
        return records, outcomes

    def cedar_facts(self) -> CedarFacts:
        """Who acts and the run as it is now, for the Cedar policies (workflow data only)."""
        ctx = self.ctx
        s, req = ctx.s, ctx.req()
        shares = [
            s.budget.usage.total_tokens / s.budget.max_total_tokens
            if s.budget.max_total_tokens
            else 0.0,
            s.budget.usage.cost_usd / s.budget.max_cost_usd if s.budget.max_cost_usd else 0.0,
        ]
        return CedarFacts(
            tenant_id=req.tenant_id,
            principal_id=req.principal_id,
            roles=sorted(set(req.roles)),
            agent=ctx.pinned().spec.name,
            child=workflow.info().parent is not None,
            turn=s.turn,
            tokens_used=s.budget.usage.total_tokens,
            cost_usd=s.budget.usage.cost_usd,
            budget_used_pct=int(max(shares) * 100),
            now=workflow.now().isoformat(),
        )

    async def _judge(
        self,
        calls: list[ToolCallRequest],
        records: list[ToolCallRecord],
        tools: dict[str, ToolInfo],
    ) -> bool:
        """The spec's judge decides the calls of ``calls`` waiting for a person, concurrently.

        Each verdict goes to :meth:`workflows.approvals.Decisions.by_judge`. A judge that fails or
        times out escalates (the call waits for a person); so does any call the judge leaves.
        Runs without patch ``policy-judge`` (none has a judge) do nothing here. Returns True when
        the judge decided every waiting call: then the run waits for nobody (no wait, no
        ``awaiting_approval`` status, no search-attribute upsert).
        """
        ctx = self.ctx
        s, pinned, req = ctx.s, ctx.pinned(), ctx.req()
        judge = pinned.spec.policy.judge
        asked = [
            (call, rec)
            for call, rec in zip(calls, records, strict=True)
            if rec.policy == "approve" and call.id in s.approvals.pending and call.id not in s.approvals.verdicts
            and call.name in tools
        ]  # fmt: skip
        if judge is None or not asked or not ctx.versions.policy_judge():
            return False
        results = [
            str(m.get("content") or "") for m in s.transcript.messages if m.get("role") == "tool"
        ]

        async def one(call: ToolCallRequest, rec: ToolCallRecord) -> None:
            inp, opts = options.policy_judge(
                pinned, req, judge, call, rec.arguments, tools[call.name], rec.reason, results
            )
            try:
                verdict = await workflow.execute_activity(
                    policy_judge, inp, **ctx.with_deadline(opts)
                )
            except ActivityError as e:
                ctx.note_deadline(e)  # then the race ends the run: timeout
                verdict = JudgeVerdict(
                    verdict="escalate", reason=f"the judge failed: {cause_message(e)}",
                    readable=False,
                )  # fmt: skip
            charges.judge(self.ctx, verdict)
            self._decisions.by_judge(call.id, judge.model, verdict)

        await self.ctx.race(lambda: asyncio.gather(*(one(c, r) for c, r in asked)), True)
        return all(cid in s.approvals.verdicts for cid in s.approvals.pending)

    async def gather(
        self,
        running: dict[str, asyncio.Future[str]],
        records: list[ToolCallRecord],
        outcomes: dict[str, str],
        bounded: bool,
    ) -> None:
        """Wait for the ``running`` calls (racing interrupts and the deadline); fill ``outcomes``.

        Raises:
            Stop: an interrupt or the deadline came first (unsettled records become cancelled).
        """
        self.ctx.publish()
        try:
            results = await self.ctx.race(lambda: asyncio.gather(*running.values()), bounded)
        except Stop:
            for call_id in running:
                rec = next(r for r in records if r.id == call_id)
                if rec.status in ("pending", "running"):
                    self.settle(rec, turn.Settled("cancelled", ""), None, announce=False)
            raise
        for call_id, res in zip(running, results, strict=True):
            outcomes[call_id] = res

    async def invoke(
        self,
        call: ToolCallRequest,
        rec: ToolCallRecord,
        info: ToolInfo | None,
        announce: bool = True,
    ) -> str:
        """Carry out one allowed or approved call through its runner; returns the model's text.

        The runner is chosen now (workflows/tool_runners.py); what it returns is recorded by
        :meth:`settle`. ``announce``: emit ``tool_started`` (not for a call announced when it
        was held, workflows/model_step.py, ToolsFirst).

        Raises:
            Stop: an interrupt or the deadline came first (a child run, a client tool, a script).
        """
        ran = await self.runners.choose(info).run(call, rec, info, announce)
        return self.settle(rec, ran, info)

    def settle(
        self, rec: ToolCallRecord, ran: Ran, info: ToolInfo | None, announce: bool = True
    ) -> str:
        """Record how a call ended, the one place that does; returns the text the model reads.

        ``ran``: a runner's :data:`~workflows.tool_runners.Ran`, the policy's or a person's
        verdict (a :class:`workflows.turn.Settled`: denied, rejected, approval timed out,
        cancelled), or a held call's outcome from its model step (``failure`` set: it failed on
        every attempt there). ``announce``: emit ``tool_finished`` (not for a call that never
        ran, nor when the model step that ran the call published it).
        """
        if isinstance(ran, ToolOutcome) and ran.failure is not None:
            ran = turn.Settled(failed_status(ran.timed_out), ran.content, reason=ran.failure)
        if isinstance(ran, ToolOutcome):
            self._record_outcome(rec, ran, info)
            text = ran.content
        else:
            rec.status, text = ran.status, ran.text
            if ran.reason is not None:
                rec.reason = ran.reason
            if ran.duration_ms is not None:
                rec.duration_ms = ran.duration_ms
            if ran.result_chars is not None:
                rec.result_chars = ran.result_chars
        if announce:
            self.finished(rec, text)
        return text

    def _record_outcome(self, rec: ToolCallRecord, out: ToolOutcome, info: ToolInfo | None) -> None:
        """Record a call's outcome: status, timing, files, arguments, sandbox time, guardrails."""
        rec.status = out.status
        rec.duration_ms = out.duration_ms
        rec.result_chars = out.output_chars
        if info is not None and info.sandboxed:
            charges.sandbox(self.ctx, out.duration_ms)
        if out.files:
            self.ctx.s.run_files.update(out.files)
        if out.arguments is not None:
            self.ran_with(rec, out.arguments)
        if out.guardrails and self.guard is not None:  # acted on when the turn's calls settled
            self.guard.note(out.guardrails, rec.id)

    def ran_with(self, rec: ToolCallRecord, arguments: dict[str, Any]) -> None:
        """Record the arguments the call runs with (a person's edit, the tool's validated ones).

        Runs that took patch ``model-arguments`` keep the model's in ``arguments`` and these in
        ``run_arguments`` when they differ; older runs replace ``arguments``.
        """
        if self.ctx.s.model_arguments:
            rec.run_arguments = arguments if arguments != rec.arguments else None
        else:
            rec.arguments = arguments

    def finished(self, rec: ToolCallRecord, result: str) -> None:
        """Emit ``tool_finished`` for a call that ended with ``result``."""
        self.ctx.emit(
            "tool_finished",
            **tool_finished_fields(
                rec.id, rec.name, rec.arguments, rec.run_arguments, rec.status, rec.duration_ms,
                result, rec.recorded,
            ),
        )  # fmt: skip

    async def _await_approvals(self) -> None:
        """Wait until every pending call has a verdict (or the approval timeout).

        Woken by :meth:`workflows.approvals.Decisions.record`, which the ``decide`` update and the
        ``approve``/``reject`` signals call: it writes ``s.approvals.verdicts``, the condition below reads it.
        A child run first tells its parent the calls it waits on (``report_approvals``: no effect
        for a top-level run).
        """
        ctx = self.ctx
        s, policy = ctx.s, ctx.pinned().spec.policy
        ctx.enter("awaiting_approval")
        self._children.report_approvals()
        waiting = list(s.approvals.pending)
        try:
            await ctx.wait_for_person(
                lambda: all(cid in s.approvals.verdicts for cid in waiting),
                policy.approval_timeout_seconds,
                f"approval of {', '.join(s.approvals.pending[c].name for c in waiting)}",
            )
        except TimeoutError:
            if policy.on_approval_timeout == "fail":
                approvals.drop_pending(s)
                raise Stop("failed", "approval timed out") from None
            for cid in waiting:
                if cid not in s.approvals.verdicts:
                    self._decisions.record(cid, "timeout", "system", None, None, "timer")
        for cid in waiting:
            approvals.answered(s, cid)
        self._children.report_approvals()
        ctx.set_status("running")
        ctx.upsert_search_attributes()
