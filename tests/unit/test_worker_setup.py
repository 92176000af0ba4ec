"""workers.worker and workers.sandbox: how the worker runs AgentRun in Temporal's sandbox."""

from __future__ import annotations

import ast
import inspect
import os
from pathlib import Path

from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

import workflows.agent_run
from workers.config import Settings
from workers.sandbox import workflow_runner

WORKFLOWS = Path(workflows.agent_run.__file__).parent


def test_the_workflows_package_is_passed_through_the_sandbox():
    runner = workflow_runner()
    assert isinstance(runner, SandboxedWorkflowRunner)
    assert "workflows" in runner.restrictions.passthrough_modules


def test_workers_run_unsandboxed_by_default_and_tests_sandboxed():
    assert Settings().workflow_sandbox is False
    assert isinstance(workflow_runner(False), UnsandboxedWorkflowRunner)
    assert Settings.model_validate({"AGENT_WORKFLOW_SANDBOX": "true"}).workflow_sandbox is True
    # the harness's workers and the worker processes tests spawn check determinism at run time
    assert os.environ["AGENT_WORKFLOW_SANDBOX"] == "true"


def test_no_workflow_class_keeps_mutable_state_on_the_class():
    """Passed through, a class is shared by every run of the worker: no list/dict/set on it."""
    offenders = []
    for path in sorted(WORKFLOWS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for stmt in node.body:
                value = getattr(stmt, "value", None)
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(
                    value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.Call)
                ):
                    if isinstance(value, ast.Call) and _is_pydantic_field(value):
                        continue
                    offenders.append(f"{path.name}:{stmt.lineno} {node.name}")
    assert offenders == []


def _is_pydantic_field(call: ast.Call) -> bool:
    name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
    return name in {"Field", "ConfigDict", "PrivateAttr"}


def test_agent_run_instances_do_not_share_state():
    members = inspect.getmembers(workflows.agent_run.AgentRun)
    shared = [n for n, v in members if not n.startswith("__") and isinstance(v, (list, dict, set))]
    assert shared == []
