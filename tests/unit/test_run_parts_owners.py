"""Each owned part of the run state is changed by one module only (issue #36 item 4).

Reads the code of ``workflows/``: an assignment to ``<x>.<part>.<field>`` (or an item of it, or
a mutating method called on it) outside the part's owner fails here. Reading is allowed anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

from workflows.run_parts import RUN_PARTS

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"

OWNERS = {
    "transcript": "transcript.py",
    "approvals": "approvals.py",
    "person_waits": "run_context.py",
    "budget": "charges.py",
    "visibility": "run_context.py",
    "delegation": "children.py",
    "held": "model_step.py",
    "client_calls": "client_tools.py",
    "guards": "guardrails.py",
    "control": "control.py",
}

MUTATORS = {
    "append", "extend", "insert", "pop", "popitem", "clear", "update", "add", "discard",
    "remove", "setdefault", "sort", "reverse",
}  # fmt: skip


def _part_field(node: ast.expr) -> str | None:
    """``part`` when ``node`` is ``<x>.<part>.<field>`` or an item of it (``[...]``)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
        part = node.value.attr
        if part in RUN_PARTS and node.attr in RUN_PARTS[part].model_fields:
            return part
    return None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        out: list[ast.expr] = []
        for t in node.targets:
            out += list(t.elts) if isinstance(t, ast.Tuple) else [t]
        return out
    if isinstance(node, ast.AugAssign | ast.AnnAssign):
        return [node.target]
    if isinstance(node, ast.Delete):
        return list(node.targets)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in MUTATORS
    ):
        return [node.func.value]
    return []


def writes() -> list[tuple[str, int, str]]:
    """(module file, line, part) of every write to a part's field in workflows/."""
    found: list[tuple[str, int, str]] = []
    for path in sorted(WORKFLOWS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            for target in _targets(node):
                part = _part_field(target)
                if part is not None:
                    found.append((path.name, getattr(node, "lineno", 0), part))
    return found


def test_every_part_has_an_owner():
    assert set(OWNERS) == set(RUN_PARTS)


def test_the_checker_sees_writes():
    kinds = {part for _, _, part in writes()}
    assert {"transcript", "approvals", "budget", "delegation", "held", "guards"} <= kinds


def test_each_part_is_changed_by_its_owner_only():
    outside = [f"{f}:{line} changes {part}" for f, line, part in writes() if OWNERS[part] != f]
    assert outside == []
