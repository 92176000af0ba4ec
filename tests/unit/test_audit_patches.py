"""The offline audit behaves as the run did under its patches (workers/history/_walk.py,
``_activities.py``): a renamed call id (``unique-call-ids``), the pattern engine (``policy-re2``)."""

from __future__ import annotations

from pathlib import Path

from workers.history import audit, load_history_file
from workers.history._entries import ToolCallEntry
from workers.history._walk import patch_ids
from workflows.versions import PATCH_POLICY_RE2, PATCH_UNIQUE_CALL_IDS

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def test_the_patch_ids_of_a_stored_history_are_read_from_its_markers():
    hostile = load_history_file(HISTORIES / "hostile_model.json")
    plain = load_history_file(HISTORIES / "tools.json")
    assert {PATCH_UNIQUE_CALL_IDS, PATCH_POLICY_RE2} <= set(patch_ids(hostile.events))
    assert PATCH_POLICY_RE2 not in set(patch_ids(plain.events))


def test_a_reused_call_id_is_audited_under_the_id_the_run_gave_it():
    """``call_0`` twice: approved, then renamed ``call_0-2`` and denied by an RE2 pattern."""
    a = audit(load_history_file(HISTORIES / "hostile_model.json"))
    calls = [
        (e.tool_call_id, e.policy, e.status) for e in a.timeline if isinstance(e, ToolCallEntry)
    ]
    assert calls == [("call_0", "approve", "ok"), ("call_0-2", "deny", "denied")]
    assert a.result is not None
    assert [(c.id, c.status) for c in a.result.tool_calls] == [
        ("call_0", "ok"),
        ("call_0-2", "denied"),
    ]
