"""Workflow ``AgentRun``: one durable agent run (docs/contract.md).

The start input is decoded in ``__init__`` (``@workflow.init``), the spec pinned by the local
activity ``spec.resolve``. Each turn: a model step (:mod:`workflows.model_step`, activity
``model.complete``) with the transcript and the tool schemas; if the reply calls tools, either
they all are calls of local tools the policy allows, held for the next model step, which runs them
first (``ToolsFirst``, in :mod:`workflows.model_step`; on by default), or the tool step
(:mod:`workflows.tool_calls`) has the policy decide each call (allow / deny / ask a person), runs
the allowed and approved calls concurrently, each by its runner (:mod:`workflows.tool_runners`:
activity ``tool.invoke``, a local activity for local tools, a child run, ...), puts the results
back in call order, and the loop goes on; a reply without tool calls ends the run (``task`` mode)
or waits for the next message (``chat`` mode). What comes next is decided by pure functions
(:mod:`workflows.turn`, over the run state :class:`workflows.models.RunData`). This class wires
those decisions to the steps, each built over the run's one
:class:`workflows.run_context.RunContext` (state, pinned spec, emit, publish, race, waits):
:class:`ModelStep`, :class:`ToolStep`, :class:`CompactionStep`, :class:`ChildStep`,
:class:`HandoffStep`, :class:`PlanStep`. Its handlers are in :mod:`workflows.handlers`, its one
base class (signals, updates, queries), except the decisions' (the ``decide`` update, the
``approve``/``reject`` signals): :class:`workflows.approvals.DecisionHandlers`, which
``RunHandlers`` extends.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError

# Every import of this module passes through the sandbox, which re-imports this module for each run.
# ``import workflows.x as x``, never ``from workflows import x``: the sandbox checks the name given
# to ``import``, so the ``from`` form would load module ``x`` afresh inside the sandbox every run.
with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.approvals as approvals
    import workflows.charges as charges
    import workflows.children as children
    import workflows.control as control
    import workflows.state as state
    import workflows.transcript as transcript
    import workflows.turn as turn
    from activities.contracts import ERR_MCP_UNAVAILABLE
    from activities.guardrail_models import GuardrailTrip
    from activities.interfaces import spec_resolve
    from activities.memory.consolidation import HANDOFF, HandoffInput, scopes_for
    from workflows.approvals import Decisions
    from workflows.children import ChildStep
    from workflows.client_tools import ClientTools
    from workflows.compaction_step import CompactionStep
    from workflows.events import RunEvents
    from workflows.guardrails import GuardrailStep
    from workflows.handlers import RunHandlers
    from workflows.handoff import HandoffStep
    from workflows.inbound import Invalid, decode
    from workflows.model_step import ModelStep, ToolsFirst
    from workflows.models import WORKFLOW_NAME, RunData, RunRequest, RunResult, RunStatus
    from workflows.planning import PlanStep
    from workflows.run_context import RunContext, Stop, cause_message
    from workflows.state import (  # the search attributes, named here for callers
        SA_AGENT,
        SA_COST,
        SA_PARENT,
        SA_PRINCIPAL,
        SA_SPEC,
        SA_STATUS,
        SA_TENANT,
        SA_TOKENS,
    )
    from workflows.tool_calls import ToolStep
    from workflows.versions import WORKFLOW_REV, Versions

__all__ = [
    "SA_AGENT",
    "SA_COST",
    "SA_PARENT",
    "SA_PRINCIPAL",
    "SA_SPEC",
    "SA_STATUS",
    "SA_TENANT",
    "SA_TOKENS",
    "WORKFLOW_REV",
    "AgentRun",
]


@workflow.defn(name=WORKFLOW_NAME)
class AgentRun(RunHandlers):
    """One agent run. Signals, update and queries are listed in docs/contract.md."""

    @workflow.init
    def __init__(self, raw: RawValue = None) -> None:  # pyright: ignore[reportArgumentType] - the SDK's default
        """Decode the start input once (see :meth:`run`) and build the steps; no command here."""
        now = workflow.now()
        self._input = decode(raw, RunRequest, "start input")
        carry = self._input.carry if isinstance(self._input, RunRequest) else None
        # the run's event stream (workflows/events.py), carried through continue-as-new
        events = RunEvents(carry.events if carry is not None else None)
        self._ctx = ctx = RunContext(RunData(started_at=now), events)
        ctx.show_in_listings(False, now=now)
        self._decisions = Decisions(ctx)
        # where the run waits for a person (and at each checkpoint), parked decisions are applied
        ctx.release_parked = self._decisions.release_parked
        self._children = ChildStep(ctx)
        self._handoffs = HandoffStep(ctx)
        self._guard = GuardrailStep(ctx)
        self._client = ClientTools(ctx)
        self._tools = ToolStep(
            ctx, self._children, self._handoffs, self._decisions, self._guard, self._client
        )
        self._first = ToolsFirst(ctx, self._tools)
        self._model = ModelStep(ctx, self._first, self._guard)
        self._compaction = CompactionStep(ctx)
        self._plan = PlanStep(ctx, self._model, self._tools)

    # ------------------------------------------------------------------ run

    @workflow.run
    async def run(self, raw: RawValue = None) -> RunResult:  # pyright: ignore[reportArgumentType] - the SDK's default
        """Run the agent loop; returns :class:`RunResult` (never raises for business outcomes).

        ``raw`` is the start input, already decoded by :meth:`__init__` as a :class:`RunRequest`:
        one that is missing or invalid ends the run ``failed`` with the validation error
        (workflows/inbound.py).
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
        s = self._ctx.s
        pinned = s.pinned
        mem = pinned.spec.memory if pinned else None
        if (
            pinned is None
            or mem is None
            or not mem.write
            or s.req is None
            or not s.transcript.messages
        ):
            return
        if not self._ctx.versions.memory_handoff():
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
            messages=s.transcript.messages,
            debounce_seconds=mem.consolidate_after_seconds,
        )
        try:
            await workflow.execute_local_activity(
                HANDOFF, inp, start_to_close_timeout=timedelta(seconds=30), result_type=str
            )
        except ActivityError as e:
            workflow.logger.warning("memory handoff failed", extra={"error": str(e.cause or e)})

    async def _run(self, req: RunRequest) -> RunResult:
        Versions.deprecated()
        started_with_sa = workflow.info().typed_search_attributes.get(SA_AGENT) is not None
        try:
            if req.carry is not None:
                self._restore(req, started_with_sa)
            else:
                self._ctx.s.req = req
                self._ctx.show_in_listings(started_with_sa)
                await self._start(req)
            return await self._loop()
        except Stop as stop:
            return self._finish(stop.status, stop.reason, error=stop.error)
        except asyncio.CancelledError:
            return self._finish("interrupted", "the workflow was cancelled")

    async def _start(self, req: RunRequest) -> None:
        """Resolve and pin the spec, write the first messages, show the run as running."""
        ctx = self._ctx
        # before the spec's local activity (a patch marker after one in the same workflow task
        # fails replay), in the same task as its marker: no action of its own (docs/throughput.md)
        # all three True for a new run (workflows/versions.py)
        in_step, resolve_local, model_arguments = Versions.at_start()
        try:
            inp, opts = options.spec_resolve(req, Versions.rev_to_pin(resolve_local))
            if resolve_local:
                pinned = await options.execute_local(spec_resolve, inp, opts)
            else:  # runs started before revision 4 (their spec.resolve is an activity)
                pinned = await workflow.execute_activity(spec_resolve, inp, **opts)
        except ActivityError as e:
            mcp = isinstance(e.cause, ApplicationError) and e.cause.type == ERR_MCP_UNAVAILABLE
            reason = "MCP server unavailable" if mcp else "invalid agent spec"
            raise Stop("failed", reason, error=cause_message(e)) from None
        s = ctx.s
        s.pinned = pinned
        transcript.counted(s, [], pinned.tools_tokens)  # counted when pinned, or None: unknown
        s.tools_in_step = in_step
        s.model_arguments = model_arguments
        if pinned.search_attributes is not None:
            # The spec activity asked the namespace (a bare client sets none at start); results
            # recorded before it did so carry None and keep the start-time gate (replay).
            ctx.show_in_listings(pinned.search_attributes)
        spec = pinned.spec
        if req.model:
            spec.model = req.model
        lim = req.limits
        if lim.max_turns is not None:
            spec.limits.max_turns = lim.max_turns
        if lim.max_seconds is not None:
            spec.limits.max_seconds = lim.max_seconds
        charges.set_limits(
            s,
            lim.max_total_tokens or spec.limits.max_total_tokens,
            lim.max_cost_usd or spec.limits.max_cost_usd,
            spec.limits.max_sandbox_seconds,
        )
        text, trips = await self._first_messages(req)
        ctx.emit("run_started", agent=req.agent, input=text)
        self._guard.note(trips)
        ctx.set_status("running")
        ctx.show_started({SA_STATUS: "running", SA_AGENT: req.agent, SA_TENANT: req.tenant_id,
                          SA_PRINCIPAL: req.principal_id})  # fmt: skip
        ctx.publish()
        await self._guard.act()  # a blocked request ends the run or waits for a person

    async def _first_messages(self, req: RunRequest) -> tuple[str, list[GuardrailTrip]]:
        """The transcript's first messages: a fork's seed, or the system prompt and the request.

        The request goes through the spec's ``input`` guardrails first (none: no command);
        returns the request as the model reads it and what it tripped (noted by the caller).
        """
        s = self._ctx.s
        if req.seed_messages:
            transcript.begin(s, [dict(m) for m in req.seed_messages])
            return req.input, []
        text, trips = await self._guard.check_input(req.input)
        transcript.begin(
            s,
            [
                {"role": "system", "content": self._ctx.pinned().spec.system_prompt},
                {"role": "user", "content": text},
            ],
        )
        return text, trips

    def _restore(self, req: RunRequest, started_with_sa: bool) -> None:
        """Take the carried run state back (continue-as-new); nothing was pending."""
        assert req.carry is not None
        carried = req.carry
        self._ctx.s = carried.model_copy(
            update={"req": req.model_copy(update={"carry": None}), "status": "running"}
        )
        self._ctx.show_in_listings(
            started_with_sa
            if carried.pinned is None or carried.pinned.search_attributes is None
            else carried.pinned.search_attributes,
            now=workflow.now(),
        )
        self._ctx.publish()

    async def _loop(self) -> RunResult:
        """Turns until a :class:`Stop` (or continue-as-new) ends the run.

        Every end goes one way: a pure decision of :mod:`workflows.turn` that says
        :class:`turn.Finish` (``completed`` included) is raised as :class:`Stop` by
        :func:`_stop_if`, as are interrupts, deadlines and failures from deeper down; :meth:`_run`
        catches it and :meth:`_finish` builds the ``RunResult``. Per turn, ``before_compaction``
        and ``maybe_compact`` create no command while an upper bound of the context's tokens
        stays under the compaction budget (workflows/compaction_step.py; the default agent's
        tool schemas' bound passes it, so they are counted when the spec is pinned,
        ``PinnedSpec.tools_tokens``);
        ``hold`` holds a turn's calls for the next model step when they all are calls of local
        tools the policy allows (``ToolsFirst``, workflows/model_step.py; on by default, never
        for a call that asks a person).
        """
        ctx = self._ctx
        s, limits = ctx.s, ctx.pinned().spec.limits
        if ctx.pinned().spec.mode == "plan" and ctx.req().mode == "task":
            await self._plan.run()
        while True:
            await ctx.checkpoint()
            await self._drain_inbox()
            await self._guard.act()  # a held call's result the model step did not take
            _stop_if(turn.before_model(s, limits))
            await self._first.before_compaction()
            await self._compaction.maybe_compact()
            reply = await self._model.step()
            if reply is None:
                continue
            transcript.add(s, reply.assistant_message())
            if reply.content:
                s.output = reply.content
            nxt = turn.after_reply(s, reply, limits)
            if isinstance(nxt, turn.WaitForMessage):
                ctx.publish()
                await self._wait_for_message()
                continue
            if not isinstance(nxt, turn.RunTools):
                ctx.publish()
                _stop_if(nxt)
                continue
            s.signatures.append(nxt.signature)
            if not self._first.hold(nxt.calls):  # held: they run in the next model step
                await self._tools.run(nxt.calls)
                await self._handoffs.apply()  # no command unless a call was a handoff
            await self._guard.act()  # a tool result a guardrail blocked
            limits = ctx.pinned().spec.limits
            self._after_tools(turn.after_tools(s, limits))
            await ctx.checkpoint()
            if self._should_continue_as_new():
                await self._first.flush()  # the next run starts with every result written
                ctx.events.detach()  # waiting subscribers follow to the next run
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._continue_as_new()

    def _after_tools(self, nxt: turn.CallModel | turn.PauseForBudget | turn.Finish) -> None:
        if isinstance(nxt, turn.PauseForBudget):
            control.pause(self._ctx.s)
            charges.pause_for_budget(self._ctx.s, True)
            workflow.logger.info("budget reached; pausing", extra={"why": nxt.reason})
        _stop_if(nxt)

    async def _wait_for_message(self) -> None:
        """Chat mode: wait for the next ``send_message`` (or end the run on the idle timeout)."""
        ctx = self._ctx
        s = ctx.s
        ctx.enter("waiting_for_message")
        try:
            await ctx.wait_for_person(
                lambda: bool(s.control.inbox),
                ctx.pinned().spec.idle_timeout_seconds,
                "the next message",
            )
        except TimeoutError:
            raise Stop("completed", "conversation idle timeout") from None
        ctx.set_status("running")
        ctx.upsert_search_attributes()

    async def _drain_inbox(self) -> None:
        """The messages sent since the last step, into the transcript.

        Checked by the spec's ``input`` guardrails first, if it has any (workflows/guardrails.py).
        """
        s = self._ctx.s
        while (m := control.next_message(s)) is not None:
            if m.client_tools:
                self._client.offer(m.client_tools, m.principal_id)
            text, trips = await self._guard.check_input(m.content)
            transcript.add(s, {"role": "user", "content": text})
            self._guard.note(trips)
        await self._guard.act()

    # ------------------------------------------------------------ continue-as-new and the end

    def _should_continue_as_new(self) -> bool:
        info = workflow.info()
        return turn.should_continue_as_new(
            self._ctx.s.turn,
            self._ctx.pinned().spec.limits,
            info.is_continue_as_new_suggested(),
            info.get_current_history_size(),
            info.get_current_history_length(),
        )

    def _continue_as_new(self) -> None:
        ctx = self._ctx
        self._decisions.drop_parked()
        s = ctx.s
        carry = s.model_copy(
            update={"continued_runs": s.continued_runs + 1, "events": ctx.events.carry()}
        )
        # Under Worker Versioning (workers/versioning.py) a run is pinned to its build; a chat
        # run moves to the current build when it continues as new (docs/upgrades.md).
        version = workflow.info().get_current_deployment_version()
        upgrade = ctx.req().mode == "chat" and version is not None and version.deployment_name
        workflow.continue_as_new(
            ctx.req().model_copy(update={"carry": carry}),
            initial_versioning_behavior=(
                workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE if upgrade else None
            ),
        )

    def _finish(self, status: RunStatus, reason: str, error: str | None = None) -> RunResult:
        """End the run with ``status``: cancel what was pending, upsert, emit ``run_finished``."""
        ctx = self._ctx
        s = ctx.s
        self._decisions.drop_parked()
        self._first.drop()
        for rec in s.tool_calls:  # never ran, or did not end: cancelled (no tool_finished)
            if rec.status in ("pending", "running"):
                self._tools.settle(rec, turn.Settled("cancelled", ""), None, announce=False)
        children.run_ended(s)
        approvals.drop_pending(s)
        ctx.enter(status)
        # the RunResult (status, reason, output, usage, tool calls, decisions) from the run state
        result = state.run_result(s, status, reason, error, workflow.now())
        ctx.emit("run_finished", result=result)
        return result


def _stop_if(nxt: turn.Next) -> None:
    """Raise :class:`Stop` when the pure decision ``nxt`` finishes the run."""
    if isinstance(nxt, turn.Finish):
        raise Stop(nxt.status, nxt.reason, error=nxt.error)
