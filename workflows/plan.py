"""Plan mode as pure data: the plan schema, its graph, step transitions, replans and reflection.

A run with ``mode: plan`` (activities/spec.py, :class:`~activities.spec.PlanSettings`) goes
plan -> act -> observe -> replan: a planning model step returns a :class:`Plan` (JSON text,
validated here with :func:`parse_plan`; an invalid plan is told back to the model, bounded), the
steps run as a graph (:func:`next_action` says which are ready; independent steps run
together: an agent step as a child run, a tool step as a tool call through the policy), each
result is recorded (:func:`start_step`, :func:`finish_step`), a failed or rejected step leads to
a replan (at most ``max_replans``; :func:`replan`), and a reflection model step writes the final
answer (:func:`reflection_request`).

Nothing here schedules anything: every function takes values and returns values, so the
workflow stays deterministic and the graph is unit-tested without a server. The plan as the
``state`` query shows it is :class:`workflows.models.PlanView`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from workflows.models import PlanStepView, PlanView

StepStatus = Literal["pending", "running", "ok", "failed", "rejected", "skipped"]
DONE: frozenset[str] = frozenset({"ok", "failed", "rejected", "skipped"})
BAD: frozenset[str] = frozenset({"failed", "rejected", "skipped"})
_MOVES: dict[str, frozenset[str]] = {
    "pending": frozenset({"running", "skipped"}),
    "running": frozenset({"ok", "failed", "rejected"}),
}
RESULT_CHARS = 2_000
"""Characters of a step's result passed on to the steps that depend on it and to reflection."""


class PlanStep(BaseModel):
    """One step of a plan: a goal carried out by an agent (a child run) or by one tool call."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,32}$", description="unique within the plan")
    goal: str = Field(min_length=1, description="what the step must achieve, stated in full")
    agent: str | None = Field(default=None, description="a sub-agent that carries the step out")
    tool: str | None = Field(default=None, description="a tool that carries the step out")
    arguments: dict[str, Any] = Field(default_factory=dict, description="the tool's arguments")
    depends_on: list[str] = Field(default_factory=list, description="ids of earlier steps")

    @model_validator(mode="after")
    def _one_doer(self) -> PlanStep:
        if (self.agent is None) == (self.tool is None):
            raise ValueError("a step names exactly one of `agent` or `tool`")
        return self


class Plan(BaseModel):
    """The planning step's structured output: the steps of the plan."""

    model_config = ConfigDict(extra="forbid")

    steps: list[PlanStep] = Field(min_length=1)


class PlanInvalid(ValueError):
    """The planning step's output is not a valid plan; the message is told to the model."""


# ------------------------------------------------------------------ parsing and validation

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def _json_text(text: str) -> str:
    fenced = _FENCE.search(text)
    if fenced:
        return fenced.group(1).strip()
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else text.strip()


def parse_plan(
    text: str | None,
    agents: Collection[str],
    tools: Collection[str],
    max_steps: int,
    done: Collection[str] = (),
) -> Plan:
    """Read and check the plan the model wrote (JSON, possibly in a ```json fence).

    Args:
        text: the model's reply text.
        agents: the sub-agents a step may name.
        tools: the tools a step may name.
        max_steps: steps a plan may hold at most (steps already done do not count).
        done: ids of steps that already succeeded (a new plan may depend on them).

    Raises:
        PlanInvalid: the message says what is wrong, for the model to fix.
    """
    try:
        plan = Plan.model_validate(json.loads(_json_text(text or "")))
    except json.JSONDecodeError as e:
        raise PlanInvalid(f"the plan is not JSON: {e}") from None
    except RecursionError:
        raise PlanInvalid("the plan is not JSON this runtime reads: nested too deeply") from None
    except ValidationError as e:
        errs = "; ".join(
            f"{'.'.join(str(x) for x in err['loc']) or 'plan'}: {err['msg']}" for err in e.errors()
        )
        raise PlanInvalid(f"the plan does not match the schema: {errs}") from None
    problems = plan_problems(plan, agents, tools, max_steps, done)
    if problems:
        raise PlanInvalid("; ".join(problems))
    return plan


def plan_problems(
    plan: Plan,
    agents: Collection[str],
    tools: Collection[str],
    max_steps: int,
    done: Collection[str] = (),
) -> list[str]:
    """What is wrong with a schema-valid plan: ids, doers, dependencies, cycles, size (or [])."""
    out: list[str] = []
    new = [s for s in plan.steps if s.id not in done]
    ids = [s.id for s in plan.steps]
    if len(new) > max_steps:
        out.append(f"the plan has {len(new)} steps; at most {max_steps} are allowed")
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        out.append(f"step ids must be unique: {', '.join(dup)}")
    known = set(ids) | set(done)
    for s in plan.steps:
        if s.agent is not None and s.agent not in agents:
            out.append(f"step {s.id}: unknown agent {s.agent!r}; known: {_names(agents)}")
        if s.tool is not None and s.tool not in tools:
            out.append(f"step {s.id}: unknown tool {s.tool!r}; known: {_names(tools)}")
        for d in s.depends_on:
            if d not in known:
                out.append(f"step {s.id}: depends on unknown step {d!r}")
            elif d == s.id:
                out.append(f"step {s.id}: depends on itself")
    cycle = find_cycle({s.id: [d for d in s.depends_on if d != s.id] for s in plan.steps})
    if cycle:
        out.append(f"the steps' dependencies form a cycle: {' -> '.join(cycle)}")
    return out


def _names(names: Collection[str]) -> str:
    return ", ".join(sorted(names)) or "(none)"


def find_cycle(deps: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle (``[a, b, a]``) in ``step id -> ids it depends on``, or None.

    Dependencies on ids outside ``deps`` are ignored (steps of an earlier plan, already done).
    """
    state: dict[str, int] = {}  # 1: on the path, 2: finished

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for d in deps.get(node, []):
            if d not in deps:
                continue
            if state.get(d) == 1:
                return [*path[path.index(d) :], d]
            if state.get(d) is None:
                found = visit(d, [*path, d])
                if found:
                    return found
        state[node] = 2
        return None

    for node in deps:
        if state.get(node) is None:
            found = visit(node, [node])
            if found:
                return found
    return None


# ------------------------------------------------------------------ the plan as it runs


def adopt(view: PlanView | None, plan: Plan) -> PlanView:
    """The view after a (re)plan: succeeded steps kept, the new plan's other steps pending.

    A step of the new plan with the id of a succeeded step is taken as that step (not rerun).
    """
    kept = [s for s in (view.steps if view else []) if s.status == "ok"]
    done = {s.id for s in kept}
    fresh = [
        PlanStepView(
            id=s.id,
            goal=s.goal,
            agent=s.agent,
            tool=s.tool,
            depends_on=list(s.depends_on),
            arguments=dict(s.arguments),
        )
        for s in plan.steps
        if s.id not in done
    ]
    return PlanView(steps=[*kept, *fresh], replans=view.replans if view else 0, phase="acting")


def begin_replan(view: PlanView) -> PlanView:
    """The view while the model writes a new plan: one more replan counted."""
    return view.model_copy(update={"replans": view.replans + 1, "phase": "planning"})


def begin_reflection(view: PlanView) -> PlanView:
    """The view while the model writes the final answer."""
    return view.model_copy(update={"phase": "reflecting"})


def _with(view: PlanView, step_id: str, **changes: Any) -> PlanView:
    steps = [s.model_copy(update=changes) if s.id == step_id else s for s in view.steps]
    if not any(s.id == step_id for s in view.steps):
        raise KeyError(f"no step {step_id!r} in the plan")
    return view.model_copy(update={"steps": steps})


def _move(view: PlanView, step_id: str, to: StepStatus, **changes: Any) -> PlanView:
    step = next((s for s in view.steps if s.id == step_id), None)
    if step is None:
        raise KeyError(f"no step {step_id!r} in the plan")
    if to not in _MOVES.get(step.status, frozenset()):
        raise ValueError(f"step {step_id}: cannot go from {step.status} to {to}")
    return _with(view, step_id, status=to, **changes)


def start_step(view: PlanView, step_id: str, run_id: str | None = None) -> PlanView:
    """``pending -> running`` (``run_id``: the child run of an agent step).

    Raises:
        KeyError: no such step. ValueError: the step is not pending.
    """
    return _move(view, step_id, "running", run_id=run_id)


def finish_step(
    view: PlanView, step_id: str, status: Literal["ok", "failed", "rejected"], result: str
) -> PlanView:
    """``running -> ok | failed | rejected`` with the step's result (its output or its error).

    Raises:
        KeyError: no such step. ValueError: the step is not running.
    """
    return _move(view, step_id, status, result=result)


def ready_steps(view: PlanView) -> list[PlanStepView]:
    """Pending steps whose dependencies all succeeded, in plan order (they may run together)."""
    ok = {s.id for s in view.steps if s.status == "ok"}
    return [s for s in view.steps if s.status == "pending" and set(s.depends_on) <= ok]


def skip_blocked(view: PlanView) -> PlanView:
    """Mark ``skipped`` every pending step that depends (transitively) on a step that went bad."""
    changed = True
    while changed:
        bad = {s.id for s in view.steps if s.status in BAD}
        blocked = [s.id for s in view.steps if s.status == "pending" and set(s.depends_on) & bad]
        changed = bool(blocked)
        for step_id in blocked:
            view = _move(view, step_id, "skipped", result="skipped: a step it depends on failed")
    return view


@dataclass(frozen=True)
class RunSteps:
    """Start these steps now (all their dependencies succeeded)."""

    step_ids: list[str]


@dataclass(frozen=True)
class AwaitSteps:
    """Steps are running and nothing else can start: wait for one to finish."""


@dataclass(frozen=True)
class Replan:
    """A step failed or was rejected and a replan is allowed: ask the model for a new plan."""

    note: str


@dataclass(frozen=True)
class Reflect:
    """Every step is done (or no replan is left): ask the model for the final answer."""

    failed: list[str]


PlanNext = RunSteps | AwaitSteps | Replan | Reflect


def next_action(view: PlanView, max_replans: int) -> PlanNext:
    """What comes next, after a plan is adopted or a step finished.

    Ready steps start first; once nothing runs, a bad step means a replan (while
    ``view.replans < max_replans``) or, replans spent, reflection over what failed.
    """
    view = skip_blocked(view)
    ready = ready_steps(view)
    if ready:
        return RunSteps([s.id for s in ready])
    if any(s.status == "running" for s in view.steps):
        return AwaitSteps()
    failed = [s.id for s in view.steps if s.status in BAD]
    if failed and view.replans < max_replans:
        return Replan(replan_note(view))
    return Reflect(failed)


# ------------------------------------------------------------------ what the model is told


def planning_prompt(agents: dict[str, str], tools: dict[str, str], max_steps: int) -> str:
    """The instruction of the planning step: the schema, the agents and tools a step may name."""
    schema = json.dumps(Plan.model_json_schema(), separators=(",", ":"))
    lines = [
        "Plan the task before doing it. Reply with only a JSON object matching this schema:",
        schema,
        f"At most {max_steps} steps. Each step names exactly one `agent` or one `tool` (with "
        "`arguments`), and `depends_on` lists the ids of steps whose results it needs. Steps "
        "without a dependency between them run at the same time.",
        "Agents: " + ("; ".join(f"{k}: {v}" for k, v in agents.items()) or "(none)"),
        "Tools: " + ("; ".join(f"{k}: {v}" for k, v in tools.items()) or "(none)"),
    ]
    return "\n".join(lines)


def invalid_plan_note(error: str) -> str:
    """Told to the model when its plan did not validate."""
    return f"That plan is not valid: {error}. Reply with a corrected plan, JSON only."


def _clip(text: str | None) -> str:
    text = text or ""
    return text if len(text) <= RESULT_CHARS else text[:RESULT_CHARS] + " [truncated]"


def step_task(view: PlanView, step: PlanStepView) -> str:
    """The task handed to an agent step: its goal and the results of the steps it depends on."""
    parts = [step.goal]
    by_id = {s.id: s for s in view.steps}
    for d in step.depends_on:
        dep = by_id.get(d)
        if dep is not None:
            parts.append(f"Result of step {d} ({dep.goal}):\n{_clip(dep.result)}")
    return "\n\n".join(parts)


def _report(view: PlanView) -> str:
    return "\n".join(f"- {s.id} [{s.status}] {s.goal}: {_clip(s.result)}" for s in view.steps)


def replan_note(view: PlanView) -> str:
    """Told to the model to ask for a new plan after a step failed or was rejected."""
    return (
        "Some steps did not succeed. Steps so far:\n"
        f"{_report(view)}\n"
        "Reply with a new plan (JSON only). Steps that succeeded are kept: depend on them by id "
        "instead of repeating them."
    )


def reflection_request(view: PlanView) -> str:
    """The last model step's instruction: the final answer from the step results, and lessons."""
    return (
        "The plan has been carried out. Steps and their results:\n"
        f"{_report(view)}\n"
        "Write the final answer to the task from these results. End with a short paragraph "
        "'What was learned:' noting what worked and what did not."
    )


def plan_markdown(view: PlanView | None) -> str:
    """Web UI details: the plan as a graph (each step, what it waits for, its status)."""
    if view is None:
        return ""
    lines = [
        "",
        f"**Plan** ({view.phase}, replans: {view.replans}):",
        "",
        "| step | by | after | status | goal |",
        "|---|---|---|---|---|",
    ]
    for s in view.steps:
        by = f"agent {s.agent}" if s.agent else f"tool {s.tool}"
        after = ", ".join(s.depends_on) or "-"
        goal = " ".join(s.goal.split())[:80]
        lines.append(f"| {s.id} | {by} | {after} | {s.status} | {goal} |")
    return "\n".join(lines) + "\n"
