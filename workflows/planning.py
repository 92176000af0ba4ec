"""Plan mode (spec ``mode: plan``) carried out: plan -> act -> observe -> replan -> reflect.

:class:`PlanStep` works on the run's context; the graph itself is :mod:`workflows.plan`
(pure). The planning step is a model step whose reply must be a plan (JSON, checked with
:func:`workflows.plan.parse_plan`; an invalid plan is told back to the model, at most
``plan.max_invalid_plans`` times). The steps then run in waves: all ready steps of a wave run
concurrently as the tool calls of one synthetic assistant message (an agent step as
``ask_<agent>``, i.e. a child run; a tool step as that tool), so the policy, approvals, usage
roll-up and interrupts apply to them exactly as to the model's own calls, and the transcript
records them. Each call's outcome settles its step; a failed or rejected step leads to a
replan (at most ``plan.max_replans``); then a reflection model step writes the final answer.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import workflows.plan as plan
    import workflows.transcript as transcript
    from activities.contracts import ToolCallRequest
    from activities.subagents import ASK_PREFIX
    from workflows.models import PlanView
    from workflows.run_context import Stop

if TYPE_CHECKING:
    from workflows.model_step import ModelStep
    from workflows.run_context import RunContext
    from workflows.tool_calls import ToolStep


def wave_calls(view: PlanView, step_ids: list[str], turn: int) -> list[ToolCallRequest]:
    """The tool calls that carry out one wave of ready steps (ids ``plan-<turn>-<step id>``)."""
    by_id = {s.id: s for s in view.steps}
    calls: list[ToolCallRequest] = []
    for sid in step_ids:
        step = by_id[sid]
        if step.agent is not None:
            name, args = f"{ASK_PREFIX}{step.agent}", {"task": plan.step_task(view, step)}
        else:
            name, args = str(step.tool), dict(step.arguments)
        calls.append(
            ToolCallRequest(id=f"plan-{turn}-{sid}", name=name, arguments=json.dumps(args))
        )
    return calls


def step_outcome(status: str) -> Literal["ok", "failed", "rejected"]:
    """A step's status from its tool call's: ``ok``, ``rejected`` (person, policy), ``failed``."""
    if status == "ok":
        return "ok"
    return "rejected" if status in ("rejected", "denied") else "failed"


class PlanStep:
    """Runs a ``mode: plan`` agent: its model steps and tool steps are the run's own."""

    def __init__(self, ctx: RunContext, model: ModelStep, tools: ToolStep) -> None:
        """Work on ``ctx`` with the run's ``model`` and ``tools`` steps; creates no command."""
        self.ctx = ctx
        self._model = model
        self._tools = tools

    async def run(self) -> None:
        """Plan, act, observe, replan, reflect; ends by raising :class:`Stop`."""
        s, settings = self.ctx.s, self.ctx.pinned().spec.plan
        if s.plan is None:
            transcript.add(s, {"role": "user", "content": self._planning_prompt()})
            s.plan = await self._make_plan(None)
        while True:
            await self.ctx.checkpoint()
            s.plan = plan.skip_blocked(s.plan)
            nxt = plan.next_action(s.plan, settings.max_replans)
            if isinstance(nxt, plan.RunSteps):
                await self._run_wave(nxt.step_ids)
            elif isinstance(nxt, plan.Replan):
                s.plan = plan.begin_replan(s.plan)
                self.ctx.emit("plan_replanning", replans=s.plan.replans)
                transcript.add(s, {"role": "user", "content": nxt.note})
                s.plan = await self._make_plan(s.plan)
            else:
                await self._reflect()

    def _planning_prompt(self) -> str:
        pinned = self.ctx.pinned()
        agents = {t.agent or t.name: t.description for t in pinned.tools if t.kind == "subagent"}
        tools = {t.name: t.description for t in pinned.tools if t.kind == "tool"}
        return plan.planning_prompt(agents, tools, pinned.spec.plan.max_steps)

    async def _make_plan(self, view: PlanView | None) -> PlanView:
        s, pinned = self.ctx.s, self.ctx.pinned()
        agents = [t.agent or t.name for t in pinned.tools if t.kind == "subagent"]
        tools = [t.name for t in pinned.tools if t.kind == "tool"]
        done = [st.id for st in view.steps if st.status == "ok"] if view else []
        invalid = 0
        while True:
            await self.ctx.checkpoint()
            reply = await self._planning_reply()
            try:
                got = plan.parse_plan(reply, agents, tools, pinned.spec.plan.max_steps, done)
            except plan.PlanInvalid as e:
                invalid += 1
                if invalid > pinned.spec.plan.max_invalid_plans:
                    raise Stop("failed", "the model wrote no valid plan", error=str(e)) from None
                transcript.add(s, {"role": "user", "content": plan.invalid_plan_note(str(e))})
                continue
            adopted = plan.adopt(view, got)
            self.ctx.emit("plan_adopted", steps=[st.id for st in adopted.steps])
            s.plan = adopted
            self.ctx.publish()
            return adopted

    async def _planning_reply(self) -> str | None:
        """One model step whose text is kept (tool calls in it are dropped from the transcript)."""
        s = self.ctx.s
        reply = None
        while reply is None:
            if s.turn >= self.ctx.pinned().spec.limits.max_turns:
                raise Stop("max_turns", "reached max_turns while planning")
            reply = await self._model.step()
        transcript.add(s, {"role": "assistant", "content": reply.content or ""})
        return reply.content

    async def _run_wave(self, step_ids: list[str]) -> None:
        s = self.ctx.s
        assert s.plan is not None
        view = s.plan
        calls = wave_calls(view, step_ids, s.turn)
        for sid in step_ids:
            view = plan.start_step(view, sid)
        s.plan = view
        self.ctx.emit("plan_steps_started", steps=step_ids)
        transcript.add(
            s,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for c in calls
                ],
            },
        )
        await self._tools.run(calls)
        self._observe_wave(step_ids, calls)

    def _observe_wave(self, step_ids: list[str], calls: list[ToolCallRequest]) -> None:
        s = self.ctx.s
        assert s.plan is not None
        results = {
            m.get("tool_call_id"): str(m.get("content") or "")
            for m in s.transcript.messages
            if m.get("role") == "tool"
        }
        status = {r.id: r.status for r in s.tool_calls}
        view = s.plan
        for sid, call in zip(step_ids, calls, strict=True):
            run_id = next(
                (c.run_id for c in s.delegation.children if c.tool_call_id == call.id), None
            )
            view = plan.finish_step(
                view,
                sid,
                step_outcome(status.get(call.id, "error")),
                results.get(call.id, ""),
            )
            if run_id is not None:
                view = view.model_copy(
                    update={
                        "steps": [
                            st.model_copy(update={"run_id": run_id}) if st.id == sid else st
                            for st in view.steps
                        ]
                    }
                )
        s.plan = view
        self.ctx.publish()

    async def _reflect(self) -> Any:
        s = self.ctx.s
        assert s.plan is not None
        s.plan = plan.begin_reflection(s.plan)
        transcript.add(s, {"role": "user", "content": plan.reflection_request(s.plan)})
        text = await self._planning_reply()
        s.output = text
        s.plan = s.plan.model_copy(update={"phase": "done"})
        raise Stop("completed", "the plan was carried out and reflected on")
