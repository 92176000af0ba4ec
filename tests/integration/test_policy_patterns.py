"""Policy patterns in a real run: the ReDoS argument gets its verdict (RE2, patch ``policy-re2``),
and a spec with a pattern RE2 cannot compile ends the run failed naming it; neither run's history
has a ``WorkflowTaskFailed`` event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.client import Client

from tests.support.harness import Harness
from workers.history import replay
from workers.testing.scripted_model import ScriptedModel, text, tool_calls
from workflows.versions import PATCH_POLICY_RE2

REDOS = "a" * 40 + "!"


def _agents(pattern: str) -> dict[str, dict[str, Any]]:
    rule = {"when": {"arg_matches": {"label": pattern}}, "action": "deny", "reason": "only a"}
    return {"default": {"policy": {"tools": {"record": {"action": "allow", "rules": [rule]}}}}}


async def _events(handle: Any) -> list[Any]:
    events = [ev async for ev in handle.fetch_history_events()]
    failed = [ev for ev in events if ev.HasField("workflow_task_failed_event_attributes")]
    assert not failed, failed[0].workflow_task_failed_event_attributes.failure.message
    return events


def _patches(events: list[Any]) -> list[str]:
    """The ``core_patch`` markers' details, as text (each holds its patch id)."""
    return [
        str(ev.marker_recorded_event_attributes.details)
        for ev in events
        if ev.HasField("marker_recorded_event_attributes")
        and ev.marker_recorded_event_attributes.marker_name == "core_patch"
    ]


async def test_the_redos_argument_gets_its_verdict_and_the_run_completes(
    client: Client, tmp_path: Path
):
    model = ScriptedModel(
        [
            tool_calls([("record", {"label": REDOS}), ("record", {"label": "aaaa"})]),
            text("done"),
        ]
    )
    async with Harness(client, tmp_path, model, agents=_agents("^(a+)+$")) as h:
        handle = await h.start("record both")
        res = await handle.result()
        events = await _events(handle)
        report = await replay(client, handle.id)
    assert res.status == "completed", res.error
    by_label = {c.arguments["label"]: c for c in res.tool_calls if isinstance(c.arguments, dict)}
    assert by_label[REDOS].status == "ok"  # no match: the tool's own action (allow)
    assert by_label["aaaa"].status == "denied"  # the rule's pattern matched: denied
    told = [str(m.get("content")) for m in model.requests[-1].body["messages"]]
    assert any("denied by policy: only a" in t for t in told), told  # the model was told why
    assert any(PATCH_POLICY_RE2 in p for p in _patches(events)), _patches(events)
    assert report.compatible, report.failure


async def test_a_pattern_re2_cannot_compile_ends_the_run_failed_naming_it(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([text("unused")])
    async with Harness(client, tmp_path, model, agents=_agents("(unclosed")) as h:
        handle = await h.start("go")
        res = await handle.result()
        await _events(handle)
    assert res.status == "failed", res
    err = res.error or ""
    assert "arg_matches" in err and "'(unclosed'" in err and "RE2" in err, err
    assert model.count == 0
