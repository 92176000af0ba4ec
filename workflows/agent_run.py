"""Workflow ``AgentRun``: one durable agent run (docs/contract.md).

Each turn: a model step (activity ``model.complete``) with the transcript and the tool schemas; if
the reply calls tools, the policy decides each call (allow / deny / approve), allowed and approved
calls run as ``tool.invoke`` activities concurrently, results go back in call order, and the loop
goes on; a reply without tool calls ends the run (``task`` mode) or waits for the next message
(``chat`` mode). What comes next is decided by pure functions (:mod:`workflows.turn`, over the run
state :class:`workflows.models.RunData`); this class carries the decisions out with activities
(options from :mod:`workflows.activity_options`), timers and waits. Handlers are in
:mod:`workflows.handlers`, tool calls in :mod:`workflows.tool_calls`, compaction in
:mod:`workflows.compacting`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

# Every import of this module passes through the sandbox, which re-imports this module for each run.
# ``import workflows.x as x``, never ``from workflows import x``: the sandbox checks the name given
# to ``import``, so the ``from`` form would load module ``x`` afresh inside the sandbox every run.
with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.model_choice as model_choice
    import workflows.state as state
    import workflows.turn as turn
    from activities.contracts import ERR_MCP_UNAVAILABLE, ERR_MODEL_OUTPUT_INVALID, ModelReply
    from activities.interfaces import model_complete, spec_resolve
    from activities.memory.consolidation import HANDOFF, HandoffInput, scopes_for
    from activities.spec import PinnedSpec
    from workflows.children import Children
    from workflows.compacting import Compacting
    from workflows.events import RunEvents
    from workflows.handlers import RunHandlers
    from workflows.handoff import Handoffs
    from workflows.held import WORKFLOW_REV
    from workflows.inbound import Invalid, decode
    from workflows.local_activity import execute_local
    from workflows.models import WORKFLOW_NAME, RunData, RunRequest, RunResult, RunStatus
    from workflows.planning import Planning
    from workflows.state import (  # noqa: F401 - the search attributes, named here for callers
        SA_AGENT,
        SA_COST,
        SA_PARENT,
        SA_PRINCIPAL,
        SA_SPEC,
        SA_STATUS,
        SA_TENANT,
        SA_TOKENS,
    )
    from workflows.tool_calls import Stop, ToolCalls, cause_message

T = TypeVar("T")

PATCH_MEMORY = "memory-consolidation"
"""Patch id of the memory handoff at the end of a run whose spec writes memory."""
PATCH_V4 = "agent-run-v4"
"""Patch id of revision 4: ``spec.resolve`` runs as a local activity (then ``WORKFLOW_REV`` 4 is
pinned, which turns on local tools and fewer upserts; docs/throughput.md)."""
PATCH_RACE_WAITS = "race-person-waits"
"""A race whose work waited for a person (Code Mode) re-arms the deadline instead of ending."""
PATCH_V2 = "agent-run-v2"
"""Patch id of the second workflow version (one deadline timer per run, throttled search-attribute
refreshes, continue-as-new at the spec's own thresholds, AgentStatus after a chat message,
compaction counting only new messages). Deprecated: every run takes these paths, histories recorded
with the marker replay, those recorded before it (v1) no longer do (tests/histories/README.md)."""
SA_REFRESH_SECONDS = 10.0
"""Least workflow time between two search-attribute refreshes within a turn loop (status changes
and the end of the run always upsert). Revision 2 only: see ``WORKFLOW_REV``."""
SA_REFRESH_TURNS = 5
"""Revision 3: TotalTokens and CostUsd are refreshed after every ``SA_REFRESH_TURNS``-th model step."""


@workflow.defn(name=WORKFLOW_NAME)
class AgentRun(ToolCalls, Compacting, RunHandlers, Children, Handoffs, Planning):
    """One agent run. Signals, update and queries are listed in docs/contract.md."""

    @workflow.init
    def __init__(self, raw: RawValue = None) -> None:  # type: ignore[assignment]
        """Decode the start input once (see :meth:`run`); nothing here creates a command."""
        now = workflow.now()
        self._s = RunData(started_at=now, sa_upserted_at=now)
        self._input = decode(raw, RunRequest, "start input")
        carry = self._input.carry if isinstance(self._input, RunRequest) else None
        # the run's event stream (workflows/events.py), carried through continue-as-new
        self._events = RunEvents(carry.events if carry is not None else None)
        self._deadline: asyncio.Future[None] | None = None
        self._deadline_waited = 0.0
        self._deadline_waits = 0
        self._seen: tuple[datetime, int] | None = None  # (time, history length) last seen
        self._outside_task = False  # this activation runs outside a workflow task (rev 3)

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, raw: RawValue = None) -> RunResult:  # type: ignore[assignment]
        """Run the agent loop; returns :class:`RunResult` (never raises for business outcomes).

        ``raw`` is the start input, decoded here as a :class:`RunRequest`: one that is missing or
        invalid ends the run ``failed`` with the validation error (workflows/inbound.py).
        """
        req = self._input
        if isinstance(req, Invalid):
            workflow.logger.warning("invalid start input", extra={"problem": req.problem})
            result = self._finish("failed", "invalid start input", error=req.problem)
        else:
            result = await self._run(req)
            await self._memory_handoff(result)
        # released stream subscribers finish in this run (no command, replay-safe)
        await workflow.wait_condition(workflow.all_handlers_finished)
        return result

    async def _memory_handoff(self, result: RunResult) -> None:
        """Hand the finished run to its (tenant, principal) consolidation workflow.

        Only when the pinned spec writes memory (``memory.write``): one local activity
        (``memory.handoff``, no server round trip of its own); its failure is logged, never the
        run's. Gated by patch ``memory-consolidation``.
        """
        pinned, s = self._s.pinned, self._s
        mem = pinned.spec.memory if pinned else None
        if mem is None or not mem.write or s.req is None or not s.messages:
            return
        if not workflow.patched(PATCH_MEMORY):
            return
        req = s.req
        inp = HandoffInput(
            run_id=workflow.info().workflow_id,
            tenant_id=req.tenant_id,
            principal_id=req.principal_id,
            agent=req.agent,
            model=pinned.spec.models()[0],
            scopes=scopes_for(mem.write, req.principal_id, req.agent, workflow.info().workflow_id),
            system_prompt=pinned.spec.system_prompt,
            messages=s.messages,
            debounce_seconds=mem.consolidate_after_seconds,
        )
        try:
            await workflow.execute_local_activity(
                HANDOFF, inp, start_to_close_timeout=timedelta(seconds=30), result_type=str
            )
        except ActivityError as e:
            workflow.logger.warning("memory handoff failed", extra={"error": str(e.cause or e)})

    async def _run(self, req: RunRequest) -> RunResult:
        workflow.deprecate_patch(PATCH_V2)
        started_with_sa = workflow.info().typed_search_attributes.get(SA_AGENT) is not None
        try:
            if req.carry is not None:
                self._restore(req, started_with_sa)
            else:
                self._s.req = req
                self._s.search_attributes = started_with_sa
                await self._start(req)
            return await self._loop()
        except Stop as stop:
            return self._finish(stop.status, stop.reason, error=stop.error)
        except asyncio.CancelledError:
            return self._finish("interrupted", "the workflow was cancelled")

    async def _start(self, req: RunRequest) -> None:
        try:
            if workflow.patched(PATCH_V4):
                inp, opts = options.resolve_spec(req, WORKFLOW_REV)
                pinned = await execute_local(spec_resolve, inp, **options.as_local(opts))
            else:  # runs started before revision 4 (their spec.resolve is an activity)
                inp, opts = options.resolve_spec(req, 3)
                pinned = await workflow.execute_activity(spec_resolve, inp, **opts)
        except ActivityError as e:
            mcp = isinstance(e.cause, ApplicationError) and e.cause.type == ERR_MCP_UNAVAILABLE
            reason = "MCP server unavailable" if mcp else "invalid agent spec"
            raise Stop("failed", reason, error=cause_message(e)) from None
        s = self._s
        s.pinned = pinned
        if pinned.search_attributes is not None:
            # The spec activity asked the namespace (a bare client sets none at start); results
            # recorded before it did so carry None and keep the start-time gate (replay).
            s.search_attributes = pinned.search_attributes
        spec = pinned.spec
        if req.model:
            spec.model = req.model
        lim = req.limits
        if lim.max_turns is not None:
            spec.limits.max_turns = lim.max_turns
        if lim.max_seconds is not None:
            spec.limits.max_seconds = lim.max_seconds
        s.max_total_tokens = lim.max_total_tokens or spec.limits.max_total_tokens
        s.max_cost_usd = lim.max_cost_usd or spec.limits.max_cost_usd
        s.max_sandbox_seconds = spec.limits.max_sandbox_seconds
        if req.seed_messages:
            s.messages = [dict(m) for m in req.seed_messages]
        else:
            s.messages = [
                {"role": "system", "content": spec.system_prompt},
                {"role": "user", "content": req.input},
            ]
        self._emit("run_started", agent=req.agent, input=req.input)
        self._set_status("running")
        started = workflow.info().typed_search_attributes
        own = {SA_STATUS: "running", SA_AGENT: req.agent, SA_TENANT: req.tenant_id,
               SA_PRINCIPAL: req.principal_id}  # fmt: skip
        if (
            self._rev4()
            and s.search_attributes
            and all(started.get(key) == value for key, value in own.items())
        ):
            # The client set who, what and "running" at start, as the run would (workers.client.
            # start_run): no upsert now; the spec hash goes with the first one the run needs.
            # A client that set other values (another tenant, say) gets them overwritten.
            s.sa_shown = {key.name: value for key, value in own.items()}
        else:
            self._upsert_search_attributes(initial=True)
        self._publish()

    def _restore(self, req: RunRequest, started_with_sa: bool) -> None:
        """Take the carried run state back (continue-as-new); nothing was pending."""
        assert req.carry is not None
        carried = req.carry
        self._s = carried.model_copy(
            update={
                "req": req.model_copy(update={"carry": None}),
                "status": "running",
                "sa_upserted_at": workflow.now(),
                "search_attributes": started_with_sa
                if carried.pinned is None or carried.pinned.search_attributes is None
                else carried.pinned.search_attributes,
            }
        )
        self._publish()

    def _pinned(self) -> PinnedSpec:
        pinned = self._s.pinned
        if pinned is None:  # cannot happen after _start/_restore: fail the run, not the task
            raise ApplicationError("the run has no pinned spec", non_retryable=True)
        return pinned

    def _req(self) -> RunRequest:
        req = self._s.req
        if req is None:
            raise ApplicationError("the run has no request", non_retryable=True)
        return req

    async def _loop(self) -> RunResult:
        s, limits = self._s, self._pinned().spec.limits
        if self._pinned().spec.mode == "plan" and self._req().mode == "task":
            await self._plan_loop()
        while True:
            await self._checkpoint()
            self._drain_inbox()
            self._stop_if(turn.before_model(s, limits))
            await self._maybe_compact()
            reply = await self._model_step()
            if reply is None:
                continue
            s.messages.append(reply.assistant_message())
            if reply.content:
                s.output = reply.content
            nxt = turn.after_reply(s, reply, limits)
            if isinstance(nxt, turn.WaitForMessage):
                self._publish()
                await self._wait_for_message()
                continue
            if not isinstance(nxt, turn.RunTools):
                self._publish()
                self._stop_if(nxt)
                continue
            s.signatures.append(nxt.signature)
            await self._run_tool_calls(nxt.calls)
            await self._apply_handoff()
            limits = self._pinned().spec.limits
            self._after_tools(turn.after_tools(s, limits))
            await self._checkpoint()
            if self._should_continue_as_new():
                self._events.detach()  # waiting subscribers follow to the next run
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._continue_as_new()

    def _stop_if(self, nxt: turn.Next) -> None:
        if isinstance(nxt, turn.Finish):
            raise Stop(nxt.status, nxt.reason, error=nxt.error)

    def _after_tools(self, nxt: turn.CallModel | turn.PauseForBudget | turn.Finish) -> None:
        if isinstance(nxt, turn.PauseForBudget):
            self._s.paused = True
            self._s.budget_paused = True
            workflow.logger.info("budget reached; pausing", extra={"why": nxt.reason})
        self._stop_if(nxt)

    # ------------------------------------------------------------ model step

    async def _model_step(self) -> ModelReply | None:
        s, pinned = self._s, self._pinned()
        s.turn += 1
        self._set_status("running")
        self._publish()
        try:
            reply = await self._call_models()
        except ActivityError as e:
            cause = e.cause
            if not (isinstance(cause, ApplicationError) and cause.type == ERR_MODEL_OUTPUT_INVALID):
                raise Stop("failed", "model step failed", error=cause_message(e)) from None
            s.parse_failures += 1
            nxt = turn.after_parse_failure(
                s.parse_failures, pinned.spec.max_parse_failures, cause_message(e)
            )
            self._stop_if(nxt)
            assert isinstance(nxt, turn.TellModel)
            # Tell the model what went wrong and let it try again; the turn counts.
            s.messages.append({"role": "user", "content": nxt.note})
            workflow.logger.warning(
                "model output unparsable; told the model", extra={"turn": s.turn}
            )
            return None
        s.usage = s.usage.add(reply.usage)
        self._emit("model_finished", reply=reply)
        # TotalTokens and CostUsd stay current in listings: each upsert is an event and a
        # visibility write on the server, so not one every turn.
        if self._rev3():  # by turns: a workflow.now() difference must not change commands
            # revision 4: not when the reply ends the turn (the status upsert that follows
            # carries the same figures in the same workflow task)
            if s.turn % SA_REFRESH_TURNS == 0 and (reply.tool_calls or not self._rev4()):
                self._upsert_search_attributes()
        elif s.sa_upserted_at is None or (
            (workflow.now() - s.sa_upserted_at).total_seconds() >= SA_REFRESH_SECONDS
        ):
            self._upsert_search_attributes()
        return reply

    async def _call_models(self) -> ModelReply:
        """The step on the spec's models in turn (workflows/model_choice.py), recorded when answered.

        Raises:
            ActivityError: the last model tried failed (or the step was not one to fall back from).
        """
        s, pinned = self._s, self._pinned()
        models, index = pinned.spec.models(), 0
        while True:
            name = models[index]
            inp, opts = options.model_step(
                pinned, self._req(), s.turn, s.messages, model=name, stream=self._events.watched()
            )
            self._emit("model_started", model=name)
            try:
                reply = await self._race(
                    functools.partial(workflow.execute_activity, model_complete, inp, **opts)
                )
            except (ActivityError, Stop) as e:
                # the step ends with nothing from it: subscribers drop its partial text
                self._emit("model_finished", reply=ModelReply(model=name))
                if isinstance(e, Stop):
                    raise
                fallback = model_choice.next_model(models, index, e)
                if fallback is None:
                    raise
                workflow.logger.warning(
                    "model step failed; trying the next model",
                    extra={"turn": s.turn, "model": name, "next": fallback},
                )
                index += 1
                continue
            s.memory = [m.id for m in reply.memory]
            if reply.memory:
                self._emit("memory_retrieved", ids=s.memory)
            s.model_steps.append(
                {
                    "turn": s.turn,
                    "model": name,
                    "duration_ms": reply.latency_ms,
                    "usage": reply.usage.model_dump(mode="json"),
                }
            )
            return reply

    # ------------------------------------------------------------ people and time

    async def _checkpoint(self) -> None:
        """A safe point: honour interrupt, pause, and the run's deadline."""
        self._settle()
        s = self._s
        if s.interrupt is not None:
            raise Stop("interrupted", s.interrupt.reason)
        if s.paused:
            before = s.status
            self._set_status("budget_paused" if s.budget_paused else "paused")
            self._upsert_search_attributes()
            self._publish()
            started = workflow.now()
            await self._wait_for_person(lambda: not s.paused, None)
            s.waited_seconds += (workflow.now() - started).total_seconds()
            self._set_status(before if before not in ("paused", "budget_paused") else "running")
            self._upsert_search_attributes()
        if self._rev3():  # only the deadline timer (an event in history) ends the run on time
            deadline = self._deadline
            if deadline is not None and deadline.done() and self._deadline_waits == s.waits:
                raise Stop("timeout", "reached max_seconds")
        elif self._remaining_seconds() <= 0:
            raise Stop("timeout", "reached max_seconds")

    async def _wait_for_message(self) -> None:
        s = self._s
        self._set_status("waiting_for_message")
        self._upsert_search_attributes()
        self._publish()
        started = workflow.now()
        try:
            await self._wait_for_person(
                lambda: bool(s.inbox),
                self._pinned().spec.idle_timeout_seconds,
                "the next message",
            )
        except TimeoutError:
            raise Stop("completed", "conversation idle timeout") from None
        s.waited_seconds += (workflow.now() - started).total_seconds()
        self._set_status("running")
        self._upsert_search_attributes()

    def _drain_inbox(self) -> None:
        s = self._s
        while s.inbox:
            m = s.inbox.pop(0)
            s.messages.append({"role": "user", "content": m.content})

    def _remaining_seconds(self) -> float:
        s = self._s
        elapsed = (workflow.now() - s.started_at).total_seconds() - s.waited_seconds
        return self._pinned().spec.limits.max_seconds - elapsed

    def _deadline_timer(self) -> asyncio.Future[None]:
        """The one timer of ``max_seconds``, re-armed only when time waiting for a person moved it.

        One durable timer for the run instead of one per step: each timer is two events and a
        server task, and almost every step ends long before the deadline.
        """
        waited, waits = self._s.waited_seconds, self._s.waits
        moved = self._deadline_waits != waits if self._rev3() else self._deadline_waited != waited
        if self._deadline is None or moved:
            if self._deadline is not None and not self._deadline.done():
                self._deadline.cancel()
            self._deadline_waited = waited
            self._deadline_waits = waits
            self._deadline = asyncio.ensure_future(
                workflow.sleep(
                    max(self._remaining_seconds(), 0.001),
                    summary=f"deadline: max_seconds={self._pinned().spec.limits.max_seconds:g}",
                )
            )
        return self._deadline

    async def _race(self, make: Callable[[], Awaitable[T]]) -> T:
        """Await ``make()`` unless an interrupt or the deadline comes first (then cancel it).

        ``make()`` may itself wait for a person (a Code Mode script's call that needs approval):
        that time does not count, so while calls wait the deadline is not taken, and a deadline
        re-armed (or passed) during such a wait is re-armed for the time left
        (patch ``race-person-waits``).
        """
        deadline = self._deadline_timer()  # its timer before make()'s first command
        task: asyncio.Future[T] = asyncio.ensure_future(make())
        while True:
            await workflow.wait_condition(
                lambda d=deadline: (
                    self._observe()
                    or task.done()
                    or self._s.interrupt is not None
                    or (d.done() and not self._s.pending)
                )
            )
            if task.done():
                return task.result()
            moved = deadline.cancelled() or self._s.waits != self._deadline_waits
            if self._s.interrupt is None and moved and workflow.patched(PATCH_RACE_WAITS):
                deadline = self._deadline_timer()
                continue
            break
        await _cancel(task)
        if self._s.interrupt is not None:
            raise Stop("interrupted", self._s.interrupt.reason)
        raise Stop("timeout", "reached max_seconds")

    # ------------------------------------------------------------ continue-as-new and the end

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return turn.should_continue_as_new(
            self._s.turn,
            self._pinned().spec.limits,
            info.is_continue_as_new_suggested(),
            info.get_current_history_size(),
            info.get_current_history_length(),
        )

    def _continue_as_new(self) -> None:
        self._drop_parked()
        s = self._s
        carry = s.model_copy(
            update={"continued_runs": s.continued_runs + 1, "events": self._events.carry()}
        )
        # Under Worker Versioning (workers/versioning.py) a run is pinned to its build; a chat
        # run moves to the current build when it continues as new (docs/upgrades.md).
        version = workflow.info().get_current_deployment_version()
        upgrade = self._req().mode == "chat" and version is not None and version.deployment_name
        workflow.continue_as_new(
            self._req().model_copy(update={"carry": carry}),
            initial_versioning_behavior=(
                workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE if upgrade else None
            ),
        )

    def _finish(self, status: RunStatus, reason: str, error: str | None = None) -> RunResult:
        s = self._s
        self._drop_parked()
        for rec in s.tool_calls:
            if rec.status in ("pending", "running"):
                rec.status = "cancelled"
        for child in s.children:
            if child.status == "running":
                child.status = "cancelled"
        s.pending.clear()
        s.child_pending.clear()
        self._set_status(status)
        self._upsert_search_attributes()
        self._publish()
        result = state.run_result(s, status, reason, error, workflow.now())
        self._emit("run_finished", result=result)
        return result

    def _set_status(self, status: Any) -> None:
        self._s.status = status
        self._emit("status", status=status)  # RunEvents emits it only when it changed

    def _emit(self, type: str, **fields: Any) -> None:
        """One event of the run's stream (docs/contract.md "Event stream"); creates no command."""
        turn = self._s.turn
        if type == "status":
            self._events.status(turn, fields["status"])
        elif type == "model_finished":
            reply: ModelReply = fields["reply"]
            usage = reply.usage.model_dump()
            self._events.model_finished(
                turn, reply.model, usage, reply.content, reply.streamed_chars
            )
        elif type == "run_finished":
            self._events.finish(turn, fields["result"].model_dump(mode="json"))
        else:
            self._events.emit(type, turn, **fields)

    def _publish(self) -> None:
        self._emit("status", status=state.shown_status(self._s))
        details = state.details(self._s)
        if details is not None:
            workflow.set_current_details(details)

    def _upsert_search_attributes(self, initial: bool = False) -> None:
        """Upsert what listings show; revision 4: only the values that changed, if any.

        Each upsert is a command, an event, a visibility write on the server and a billed
        Temporal Cloud action (docs/throughput.md).
        """
        s = self._s
        if not s.search_attributes or s.req is None:
            return
        if not self._rev4():
            workflow.upsert_search_attributes(state.search_attribute_pairs(s, initial))
            s.sa_upserted_at = workflow.now()
            return
        # all of them, who and what included: what listings already show drops out
        pairs = state.search_attribute_pairs(s, initial=True)
        changed = [p for p in pairs if s.sa_shown.get(p.key.name, ...) != p.value]
        if not changed:
            return
        workflow.upsert_search_attributes(changed)
        s.sa_shown.update({p.key.name: p.value for p in changed})
        s.sa_upserted_at = workflow.now()


async def _cancel(task: asyncio.Future[Any]) -> None:
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, CancelledError, ActivityError):
        pass
