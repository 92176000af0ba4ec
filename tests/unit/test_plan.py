"""Plan mode's pure graph (workflows/plan.py): parsing, validation, readiness, replans."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from workflows import plan as P
from workflows.models import PlanView

AGENTS = {"reader", "writer"}
TOOLS = {"read_file"}


def diamond() -> str:
    return json.dumps(
        {
            "steps": [
                {"id": "A", "goal": "read the files", "agent": "reader"},
                {"id": "B", "goal": "summarise part 1", "agent": "writer", "depends_on": ["A"]},
                {"id": "C", "goal": "summarise part 2", "agent": "writer", "depends_on": ["A"]},
                {"id": "D", "goal": "join", "agent": "writer", "depends_on": ["B", "C"]},
            ]
        }
    )


def adopted(text: str | None = None) -> PlanView:
    return P.adopt(None, P.parse_plan(text or diamond(), AGENTS, TOOLS, 8))


def run(
    view: PlanView,
    step_id: str,
    status: Literal["ok", "failed", "rejected"] = "ok",
    result: str = "done",
) -> PlanView:
    return P.finish_step(P.start_step(view, step_id), step_id, status, result)


def test_diamond_runs_a_then_b_and_c_together_then_d():
    view = adopted()
    assert P.next_action(view, 1) == P.RunSteps(["A"])
    view = run(view, "A")
    assert P.next_action(view, 1) == P.RunSteps(["B", "C"])
    view = P.start_step(P.start_step(view, "B"), "C")
    assert P.next_action(view, 1) == P.AwaitSteps()
    view = P.finish_step(view, "B", "ok", "one")
    assert P.next_action(view, 1) == P.AwaitSteps()  # D still waits for C
    view = P.finish_step(view, "C", "ok", "two")
    assert P.next_action(view, 1) == P.RunSteps(["D"])
    view = run(view, "D")
    assert P.next_action(view, 1) == P.Reflect([])
    assert [s.status for s in view.steps] == ["ok"] * 4


def test_plan_in_a_fence_with_prose_is_read():
    view = adopted(f"Here is my plan:\n```json\n{diamond()}\n```\nThanks")
    assert [s.id for s in view.steps] == ["A", "B", "C", "D"]


@pytest.mark.parametrize(
    "steps, message",
    [
        ([{"id": "A", "goal": "g", "agent": "nobody"}], "unknown agent 'nobody'"),
        ([{"id": "A", "goal": "g", "tool": "rm_rf"}], "unknown tool 'rm_rf'"),
        ([{"id": "A", "goal": "g", "agent": "reader", "depends_on": ["Z"]}], "unknown step 'Z'"),
        ([{"id": "A", "goal": "g", "agent": "reader", "depends_on": ["A"]}], "depends on itself"),
        (
            [
                {"id": "A", "goal": "g", "agent": "reader", "depends_on": ["B"]},
                {"id": "B", "goal": "g", "agent": "reader", "depends_on": ["A"]},
            ],
            "cycle: A -> B -> A",
        ),
        (
            [
                {"id": "A", "goal": "g", "agent": "reader"},
                {"id": "A", "goal": "h", "tool": "read_file"},
            ],
            "unique: A",
        ),
        ([{"id": "A", "goal": "g", "agent": "reader", "tool": "read_file"}], "exactly one"),
        ([{"id": "A", "goal": "g"}], "exactly one"),
        ([], "at least 1"),
    ],
)
def test_invalid_plans_say_why(steps: list, message: str):
    with pytest.raises(P.PlanInvalid, match=message.replace("(", r"\(")):
        P.parse_plan(json.dumps({"steps": steps}), AGENTS, TOOLS, 8)


def test_not_json_and_too_many_steps():
    with pytest.raises(P.PlanInvalid, match="not JSON"):
        P.parse_plan("I will first read the files", AGENTS, TOOLS, 8)
    with pytest.raises(P.PlanInvalid, match="4 steps; at most 3"):
        P.parse_plan(diamond(), AGENTS, TOOLS, 3)


def test_transitions_are_checked():
    view = adopted()
    with pytest.raises(ValueError, match="from pending to ok"):
        P.finish_step(view, "A", "ok", "x")
    with pytest.raises(KeyError):
        P.start_step(view, "nope")
    view = run(view, "A")
    with pytest.raises(ValueError, match="from ok to running"):
        P.start_step(view, "A")


def test_a_failed_step_skips_its_dependants_and_asks_for_one_replan():
    view = run(adopted(), "A")
    view = run(run(view, "B"), "C", "failed", "the writer crashed")
    step = P.next_action(view, 1)
    assert isinstance(step, P.Replan)
    assert "C [failed]" in step.note and "the writer crashed" in step.note
    assert "D [skipped]" in step.note
    view = P.begin_replan(P.skip_blocked(view))
    assert view.replans == 1 and view.phase == "planning"
    # the new plan depends on the kept steps by id and redoes C as E
    new = {
        "steps": [
            {"id": "E", "goal": "summarise part 2 again", "agent": "reader", "depends_on": ["A"]},
            {"id": "F", "goal": "join", "agent": "writer", "depends_on": ["B", "E"]},
        ]
    }
    done = [s.id for s in view.steps if s.status == "ok"]
    view = P.adopt(view, P.parse_plan(json.dumps(new), AGENTS, TOOLS, 8, done))
    assert [(s.id, s.status) for s in view.steps] == [
        ("A", "ok"),
        ("B", "ok"),
        ("E", "pending"),
        ("F", "pending"),
    ]
    assert view.replans == 1
    assert P.next_action(view, 1) == P.RunSteps(["E"])
    view = run(view, "E", "rejected", "a person said no")
    assert P.next_action(view, 1) == P.Reflect(["E", "F"])  # replans spent


def test_a_resent_done_step_is_not_rerun():
    view = run(adopted(), "A")
    view = P.adopt(view, P.parse_plan(diamond(), AGENTS, TOOLS, 3, ["A"]))
    assert [(s.id, s.status) for s in view.steps][0] == ("A", "ok")
    assert P.next_action(view, 0) == P.RunSteps(["B", "C"])


def test_step_task_passes_on_dependency_results_and_reflection_lists_them():
    view = run(adopted(), "A", result="file a says 42")
    b = next(s for s in view.steps if s.id == "B")
    task = P.step_task(view, b)
    assert task.startswith("summarise part 1") and "file a says 42" in task
    long = run(adopted(), "A", result="x" * 5000)
    assert "[truncated]" in P.step_task(long, b)
    text = P.reflection_request(view)
    assert "A [ok]" in text and "What was learned" in text


def test_planning_prompt_names_agents_tools_and_schema():
    text = P.planning_prompt({"reader": "reads files"}, {"read_file": "reads one file"}, 5)
    assert "reader: reads files" in text and "read_file" in text and "At most 5" in text
    assert '"depends_on"' in text
    assert "not valid: boom" in P.invalid_plan_note("boom")


def test_find_cycle_ignores_outside_ids():
    assert P.find_cycle({"a": ["x"], "b": ["a"]}) is None
    assert P.find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]


def test_plan_markdown_shows_the_graph():
    view = run(adopted(), "A")
    md = P.plan_markdown(view)
    assert "| A | agent reader | - | ok |" in md
    assert "| D | agent writer | B, C | pending |" in md
    assert P.plan_markdown(None) == ""
