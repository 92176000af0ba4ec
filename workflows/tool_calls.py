"""The tool calls of one turn, carried out: policy, approvals, ``tool.invoke`` activities, results.

A mixin of :class:`workflows.agent_run.AgentRun`. How each call settles (denied, approved, rejected,
timed out, failed, cancelled) and the text the model is told come from :mod:`workflows.turn`;
this module only schedules the activities and waits. Results go back into the transcript in the
order the model wrote the calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.turn as turn
    from activities.contracts import ToolCallRequest, ToolInfo, ToolOutcome, Usage
    from activities.interfaces import tool_invoke
    from activities.spec import PinnedSpec
    from workflows.code_mode import run_script
    from workflows.local_activity import execute_local
    from workflows.models import (
        Decision,
        PendingApproval,
        RunData,
        RunRequest,
        RunStatus,
        ToolCallRecord,
    )
    from workflows.policy import evaluate

T = TypeVar("T")


class Stop(Exception):
    """Ends the loop with a status (internal)."""

    def __init__(self, status: RunStatus, reason: str, error: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.error = error


def cause_message(e: ActivityError) -> str:
    """The messages of an activity error's cause chain, joined with ``: ``."""
    cause: BaseException | None = e.cause
    parts = []
    while cause is not None:
        parts.append(str(cause))
        cause = getattr(cause, "cause", None)
    return ": ".join(p for p in parts if p) or str(e)


class ToolCalls:
    """Runs a turn's tool calls; ``self._s`` is the run state."""

    _s: RunData
    _pinned: Callable[[], PinnedSpec]
    _req: Callable[[], RunRequest]
    _race: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]
    _set_status: Callable[[Any], None]
    _publish: Callable[[], None]
    _upsert_search_attributes: Callable[..., None]
    _emit: Callable[..., None]
    _settle: Callable[[], bool]
    _rev3: Callable[[], bool]
    _rev4: Callable[[], bool]
    _outside_task: bool
    _ask_share: int
    _invoke_agent: Callable[[ToolCallRequest, ToolCallRecord, ToolInfo], Awaitable[str]]
    _report_approvals: Callable[[], None]

    async def _run_tool_calls(self, calls: list[ToolCallRequest]) -> None:
        tools = {t.name: t for t in self._pinned().tools}
        self._ask_share = sum(
            1 for c in calls if c.name in tools and tools[c.name].kind == "subagent"
        )
        _, outcomes = await self._execute_calls(calls)
        for call in calls:
            self._s.messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": outcomes.get(call.id, "")}
            )
        self._publish()

    async def _execute_calls(
        self, calls: list[ToolCallRequest]
    ) -> tuple[list[ToolCallRecord], dict[str, str]]:
        """Carry the calls out: policy, approvals, then concurrently their activities.

        Returns their records (in order) and each call's result text by id. Used for a turn's
        calls and for the calls a Code Mode script makes (workflows/code_mode.py).
        """
        tools = {t.name: t for t in self._pinned().tools}
        records, outcomes = self._apply_policy(calls, tools)
        running: dict[str, asyncio.Future[ToolOutcome | str]] = {}
        for call, rec in zip(calls, records, strict=True):
            if rec.policy == "allow":
                running[call.id] = asyncio.ensure_future(
                    self._invoke(call, rec, tools.get(call.name))
                )
        if self._s.pending:
            self._settle()
            await self._await_approvals()
            for call, rec in zip(calls, records, strict=True):
                if rec.policy != "approve":
                    continue
                verdict = self._s.verdicts.get(call.id)
                settled = turn.settle_by_verdict(verdict)
                if settled is None and verdict is not None:
                    if verdict.arguments is not None:
                        rec.arguments = verdict.arguments
                    running[call.id] = asyncio.ensure_future(
                        self._invoke(call, rec, tools.get(call.name))
                    )
                elif settled is not None:
                    rec.status = settled.status
                    outcomes[call.id] = settled.text
        if running:
            await self._gather(running, records, outcomes)
        return records, outcomes

    def _apply_policy(
        self, calls: list[ToolCallRequest], tools: dict[str, ToolInfo]
    ) -> tuple[list[ToolCallRecord], dict[str, str]]:
        """Records of the calls as the policy leaves them; texts of the denied ones."""
        s, req, spec = self._s, self._req(), self._pinned().spec
        records: list[ToolCallRecord] = []
        outcomes: dict[str, str] = {}
        for call in calls:
            decision = evaluate(
                spec.policy,
                tools.get(call.name),
                call.name,
                call.arguments,
                req.tenant_id,
                req.principal_id,
            )
            rec, settled = turn.settle_by_policy(call, decision, s.turn)
            records.append(rec)
            s.tool_calls.append(rec)
            if settled is not None:
                rec.status = settled.status
                outcomes[call.id] = settled.text
            elif decision.action == "approve":
                s.pending[call.id] = PendingApproval(
                    tool_call_id=call.id,
                    name=call.name,
                    arguments=rec.arguments,
                    requested_at=workflow.now().isoformat(),
                    turn=s.turn,
                    approvers=decision.approvers,
                    reason=decision.reason,
                )
                if self._rev3() and self._outside_task:
                    # the model's reply was applied outside a workflow task (a query on a
                    # worker without the run cached): not in history until the next task
                    s.unconfirmed.add(call.id)
                self._emit(
                    "approval_requested",
                    tool_call_id=call.id,
                    name=call.name,
                    arguments=rec.arguments,
                )
        return records, outcomes

    async def _gather(
        self,
        running: dict[str, asyncio.Future[ToolOutcome | str]],
        records: list[ToolCallRecord],
        outcomes: dict[str, str],
    ) -> None:
        self._publish()
        try:
            results = await self._race(lambda: asyncio.gather(*running.values()))
        except Stop:
            for call_id in running:
                rec = next(r for r in records if r.id == call_id)
                if rec.status in ("pending", "running"):
                    rec.status = "cancelled"
            raise
        for call_id, res in zip(running, results, strict=True):
            outcomes[call_id] = res if isinstance(res, str) else res.content

    async def _invoke(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo | None
    ) -> ToolOutcome | str:
        if info is not None and info.kind == "code":  # a Code Mode script
            return await run_script(self, call, rec, info)
        if info is not None and info.kind != "tool":  # ask_<NAME>, handoff_to_<NAME>
            return await self._invoke_agent(call, rec, info)
        rec.status = "running"
        arguments: str | dict[str, Any] = (
            rec.arguments if isinstance(rec.arguments, dict) else call.arguments
        )
        inp, opts = options.tool_call(
            self._pinned(), self._req(), self._s.turn, call, arguments, info, self._s.run_files
        )
        self._emit("tool_started", tool_call_id=call.id, name=call.name, arguments=rec.arguments)
        try:
            if self._rev4() and options.runs_local(info):
                out = await execute_local(tool_invoke, inp, **options.as_local(opts))
            else:
                out = await workflow.execute_activity(tool_invoke, inp, **opts)
        except ActivityError as e:
            msg = cause_message(e)
            settled = turn.settle_failure(
                timed_out=turn.is_timeout_error(e.cause),
                cancelled=isinstance(e.cause, CancelledError),  # interrupt, max_seconds, cancel
                message=msg,
                attempts=options.tool_attempts(info),
            )
            rec.status = settled.status
            rec.reason = msg
            self._tool_finished(rec, settled.text)
            return settled.text
        rec.status = out.status
        rec.duration_ms = out.duration_ms
        rec.result_chars = out.output_chars
        if info is not None and info.sandboxed:
            self._charge_sandbox(out.duration_ms)
        if out.files:
            self._s.run_files.update(out.files)
        if out.arguments is not None:
            rec.arguments = out.arguments
        self._tool_finished(rec, out.content)
        return out

    def _charge_sandbox(self, duration_ms: float) -> None:
        """Count a sandboxed call's time against the sandbox budget.

        Its price (``pricing.sandbox_per_second``) goes into the run's cost.
        """
        s, price = self._s, self._pinned().spec.pricing.sandbox_per_second
        s.sandbox_seconds = round(s.sandbox_seconds + duration_ms / 1000, 3)
        if price:
            s.usage = s.usage.add(Usage(cost_usd=duration_ms / 1000 * price))

    def _tool_finished(self, rec: ToolCallRecord, result: str) -> None:
        self._emit(
            "tool_finished",
            tool_call_id=rec.id,
            name=rec.name,
            arguments=rec.arguments,
            status=rec.status,
            duration_ms=rec.duration_ms,
            result=result,
        )

    async def _await_approvals(self) -> None:
        s, policy = self._s, self._pinned().spec.policy
        self._set_status("awaiting_approval")
        self._upsert_search_attributes()
        self._publish()
        self._report_approvals()
        waiting = list(s.pending)
        started = workflow.now()
        try:
            await self._wait_for_person(
                lambda: all(cid in s.verdicts for cid in waiting),
                policy.approval_timeout_seconds,
                f"approval of {', '.join(s.pending[c].name for c in waiting)}",
            )
        except TimeoutError:
            s.waited_seconds += (workflow.now() - started).total_seconds()
            if policy.on_approval_timeout == "fail":
                s.pending.clear()
                raise Stop("failed", "approval timed out") from None
            for cid in waiting:
                if cid not in s.verdicts:
                    self._timed_out(cid)
        else:
            s.waited_seconds += (workflow.now() - started).total_seconds()
        for cid in waiting:
            s.pending.pop(cid, None)
        self._report_approvals()
        self._set_status("running")
        self._upsert_search_attributes()

    def _timed_out(self, call_id: str) -> None:
        s = self._s
        d = Decision(
            tool_call_id=call_id,
            decision="timeout",
            principal_id="system",
            at=workflow.now().isoformat(),
            via="timer",
        )
        s.verdicts[call_id] = d
        s.decisions.append(d)
        pending = s.pending.get(call_id)
        self._emit(
            "approval_decided",
            tool_call_id=call_id,
            name=pending.name if pending else "",
            arguments=pending.arguments if pending else None,
            decision="timeout",
            principal_id="system",
        )

    async def _wait_for_person(
        self, done: Callable[[], bool], timeout: float | None, what: str = "a person"
    ) -> None:
        """Wait (durably) until ``done()`` or an interrupt; raises asyncio.TimeoutError on timeout.

        ``what`` names the wait in the timer's summary (Web UI timeline).
        """
        self._s.waits += 1
        await workflow.wait_condition(
            lambda: self._settle() or done() or self._s.interrupt is not None,
            timeout=timeout,
            timeout_summary=f"waiting for {what} (timeout)" if timeout is not None else None,
        )
        if self._s.interrupt is not None:
            raise Stop("interrupted", self._s.interrupt.reason)
