"""Issue #36: every version decision of AgentRun is in workflows/versions.py."""

from __future__ import annotations

import re
from pathlib import Path

from workflows.versions import Versions

WORKFLOWS = Path(__file__).resolve().parents[2] / "workflows"
ASKS = re.compile(
    r"workflow\.patched|deprecate_patch|workflow_rev\s*(?:[<>]=?|==|!=)|\brev[0-9]\(\)"
)


def test_no_module_but_versions_asks_a_patch_or_the_revision():
    offenders = [
        f"{path.name}:{n}: {line.strip()}"
        for path in sorted(WORKFLOWS.glob("*.py"))
        if path.name != "versions.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ASKS.search(line) and not line.lstrip().startswith("#")
    ]
    assert offenders == []


class _Pinned:
    def __init__(self, rev: int) -> None:
        self.workflow_rev = rev


def _capabilities(rev: int | None) -> dict[str, bool]:
    v = Versions(lambda: None if rev is None else _Pinned(rev))  # pyright: ignore[reportArgumentType]
    names = [
        "deadline_by_events",
        "refresh_by_turns",
        "park_early_decisions",
        "local_tool_activities",
        "upsert_changed_only",
        "deadline_as_timeout",
    ]
    return {n: getattr(v, n) for n in names}


def test_capabilities_follow_the_pinned_revision():
    assert not any(_capabilities(None).values())  # before spec.resolve answered
    assert not any(_capabilities(0).values())  # recorded before revisions existed
    rev3 = _capabilities(3)
    assert rev3["deadline_by_events"] and rev3["park_early_decisions"]
    assert not rev3["local_tool_activities"] and not rev3["deadline_as_timeout"]
    rev4 = _capabilities(4)
    assert rev4["local_tool_activities"] and rev4["upsert_changed_only"]
    assert not rev4["deadline_as_timeout"]
    assert all(_capabilities(5).values())


def test_guardrails_are_revision_6():
    """docs/guardrails.md: runs pinned before revision 6 never check or act on guardrails."""

    def guardrails(rev: int | None) -> bool:
        return Versions(lambda: None if rev is None else _Pinned(rev)).guardrails  # pyright: ignore[reportArgumentType]

    assert [guardrails(r) for r in (None, 0, 5, 6)] == [False, False, False, True]
