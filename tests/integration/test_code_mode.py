"""Code Mode: one model turn runs a script over the agent's tools; each tool call the script makes
is an ordinary tool call of the run (policy, approval, audit), gathered calls run concurrently
(issue #22, docs/sandbox.md "Code Mode")."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from tests.support.harness import Harness, until_state
from workers import client as rc
from workers.history import audit_run
from workers.testing.scripted_model import ScriptedModel, text, tool_call

SIX_CALLS = """
import asyncio
a, b, c = await asyncio.gather(
    read_file(path="README.md"), read_file(path="notes.txt"), list_files(path=".")
)
x = await calculator(expression="6*7")
y = await calculator(expression=x + "+1")
z = await calculator(expression=str(len(a.splitlines())) + "*2")
print("lines", len(a.splitlines()), len(b.splitlines()))
{"answer": int(x), "next": y, "double_lines": z, "has_notes": "notes.txt" in c}
"""

CODE_MODE = {
    "tools": ["read_file", "list_files", "calculator", "write_file"],
    "code_mode": {"tools": ["read_file", "list_files", "calculator", "write_file"]},
}


def _script_result(model: ScriptedModel, request: int = 1) -> dict:
    """The last tool result the model was given in request ``request`` (the script's)."""
    msgs = [m["content"] for m in model.requests[request].messages if m["role"] == "tool"]
    return json.loads(msgs[-1])


async def test_six_tool_calls_in_one_model_turn_gathered_ones_concurrently(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([tool_call("run_code", {"script": SIX_CALLS}), text("42, done")])
    async with Harness(client, tmp_path, model, agents={"default": CODE_MODE}) as h:
        (h.workspace / "notes.txt").write_text("one\ntwo\n")
        handle = await h.start("compute it with one script")
        res = await handle.result()
    assert res.status == "completed" and res.turns == 2  # one turn of tools, one answer
    out = _script_result(model)
    assert out["status"] == "ok", out
    _, lines, notes_lines = out["stdout"].split()  # what read_file returned, as the script saw it
    assert int(notes_lines) >= 2
    assert out["value"] == {
        "answer": 42,
        "next": "43",
        "double_lines": str(int(lines) * 2),
        "has_notes": True,
    }
    assert out["tool_calls"] == 6 and out["steps"] == 5  # 1 gathered batch + 3 awaits + the end
    # the model was offered typed stubs of the tools it may call
    [tool] = [t for t in model.requests[0].tools if t["function"]["name"] == "run_code"]
    assert "async def read_file(*, path: str" in tool["function"]["description"]
    # each host call is a tool call of the run, id <script call>.<n>, in the script's order
    parent = res.tool_calls[0]
    assert (parent.name, parent.status) == ("run_code", "ok")
    hosted = [(c.id, c.name, c.status) for c in res.tool_calls[1:]]
    assert hosted == [
        (f"{parent.id}.1", "read_file", "ok"),
        (f"{parent.id}.2", "read_file", "ok"),
        (f"{parent.id}.3", "list_files", "ok"),
        (f"{parent.id}.4", "calculator", "ok"),
        (f"{parent.id}.5", "calculator", "ok"),
        (f"{parent.id}.6", "calculator", "ok"),
    ]
    # the gathered batch was scheduled in one workflow task (concurrently), the rest one by one
    events = [e async for e in handle.fetch_history_events()]
    steps = [
        e
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "code.step"
    ]
    assert len(steps) == 5
    trail = await audit_run(client, handle.id)
    names = [e.name for e in trail.timeline if e.kind == "tool_call"]
    assert names.count("read_file") == 2 and names.count("calculator") == 3


async def test_a_script_call_that_needs_approval_waits_and_a_refused_one_raises_in_the_script(
    client: Client, tmp_path: Path
):
    script = (
        'await write_file(path="notes/a.md", content="hello")\n'
        "try:\n"
        '    await write_file(path="notes/b.md", content="nope")\n'
        "    second = 'written'\n"
        "except PermissionError as e:\n"
        "    second = 'refused: ' + str(e)[:40]\n"
        "second"
    )
    model = ScriptedModel([tool_call("run_code", {"script": script}), text("done")])
    async with Harness(client, tmp_path, model, agents={"default": CODE_MODE}) as h:
        handle = await h.start("write two notes")
        st = await until_state(handle, lambda s: s.pending_approvals)
        [p] = st.pending_approvals
        assert p.name == "write_file" and p.tool_call_id.endswith(".1")
        assert st.status == "awaiting_approval"
        await rc.decide(client, handle.id, p.tool_call_id, "approve", "ann")
        st = await until_state(
            handle,
            lambda s: s.pending_approvals and s.pending_approvals[0].tool_call_id != p.tool_call_id,
        )
        [q] = st.pending_approvals
        await rc.decide(client, handle.id, q.tool_call_id, "reject", "ann", reason="not this one")
        res = await handle.result()
    assert res.status == "completed"
    out = _script_result(model)
    assert out["status"] == "ok" and out["value"].startswith("refused: "), out
    assert (h.workspace / "notes" / "a.md").read_text() == "hello"
    assert not (h.workspace / "notes" / "b.md").exists()
    assert [d.decision for d in res.decisions] == ["approve", "reject"]


async def test_script_errors_and_unlisted_tools_are_results_the_model_reads(
    client: Client, tmp_path: Path
):
    scripts = [
        "await search_files(query='x')",  # an agent tool the script may not call
        "1/0",
        "while True:\n    pass",  # past step_seconds
        "def f(:\n  pass",
    ]
    model = ScriptedModel(
        [tool_call("run_code", {"script": s}) for s in scripts] + [text("gave up")]
    )
    agents = {
        "default": {**CODE_MODE, "code_mode": {**CODE_MODE["code_mode"], "step_seconds": 0.5}}
    }
    async with Harness(client, tmp_path, model, agents=agents) as h:
        res = await (await h.start("try things")).result()
    assert res.status == "completed"
    errors = [_script_result(model, i)["error"] for i in range(1, 5)]
    assert "NameError" in errors[0] and "search_files" in errors[0]
    assert "ZeroDivisionError" in errors[1]
    assert "TimeoutError" in errors[2]
    assert "SyntaxError" in errors[3]
    assert all(_script_result(model, i)["status"] == "error" for i in range(1, 5))
