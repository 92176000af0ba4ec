"""workers.worker and workers.sandbox: how the worker runs AgentRun in Temporal's sandbox."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import workflows.agent_run
from workers.sandbox import workflow_runner

WORKFLOWS = Path(workflows.agent_run.__file__).parent


def test_the_workflows_package_is_passed_through_the_sandbox():
    assert "workflows" in workflow_runner().restrictions.passthrough_modules


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
