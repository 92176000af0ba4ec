"""Workflow modules import their siblings by full name, so the sandbox passes them through.

The worker passes the whole ``workflows`` package through Temporal's sandbox
(``workers/sandbox.py``); a test or tool that runs ``AgentRun`` in the default sandbox re-imports
``workflows/agent_run.py`` for every run and checks the name each import statement gives:
``from workflows import turn`` names the package (already loaded inside the sandbox), so ``turn``
would be loaded afresh inside the sandbox every run (measured: 5 modules, about 5 ms of worker CPU
per run); ``import workflows.turn as turn`` is passed through either way.
"""

from __future__ import annotations

import ast
from pathlib import Path

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"


def test_no_workflow_module_imports_a_sibling_through_the_package():
    offenders = []
    for path in sorted(WORKFLOWS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "workflows":
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []
