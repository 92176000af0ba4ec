"""The activity declarations the workflow calls match the implementations the worker registers."""

from __future__ import annotations

import pytest
from temporalio import activity
from temporalio.common import _type_hints_from_func

from activities.code_mode import CodeRunner
from activities.interfaces import DECLARATIONS
from activities.model import ModelActivities
from activities.runtime import RuntimeActivities
from activities.tokens import tokens_count
from workers.config import Settings
from workers.worker import build_worker

IMPLEMENTATIONS = {
    "spec.resolve": RuntimeActivities.spec_resolve,
    "model.complete": ModelActivities.model_complete,
    "tool.invoke": RuntimeActivities.tool_invoke,
    "tokens.count": tokens_count,
    "code.step": CodeRunner.code_step,
    "guardrail.check": RuntimeActivities.guardrail_check,
    "policy.judge": ModelActivities.policy_judge,
}


@pytest.mark.parametrize("declared", DECLARATIONS, ids=lambda f: f.__name__)
def test_each_declaration_has_an_implementation_of_the_same_names_and_types(declared):
    name = activity._Definition.must_from_callable(declared).name
    assert name is not None  # declared activities are named (not dynamic)
    impl = IMPLEMENTATIONS[name]
    assert activity._Definition.must_from_callable(impl).name == name
    assert impl.__name__ == declared.__name__  # one Python name to grep for
    assert _type_hints_from_func(declared) == _type_hints_from_func(impl)


async def test_the_worker_registers_every_declared_activity(client, tmp_path):
    worker = build_worker(client, Settings(spec_file=str(tmp_path / "none.yml")), task_queue="tq-x")
    assert worker._activity_worker is not None  # noqa: SLF001 - the worker has activities
    registered = set(worker._activity_worker._activities)  # noqa: SLF001 - the worker's own table
    assert {activity._Definition.must_from_callable(d).name for d in DECLARATIONS} <= registered


async def test_a_declaration_never_runs():
    with pytest.raises(NotImplementedError, match="declaration only"):
        await DECLARATIONS[1](None)  # pyright: ignore[reportArgumentType] - no input on purpose: a declaration never runs
