"""An agent run that writes and runs code in the sandbox (issue #22)."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import Client

from tests.support.harness import Harness, until_state
from workers import client as rc
from workers.testing.scripted_model import Reply, ScriptedModel, text, tool_call

CODE = "text = open('README.md').read()\nprint(len(text.split()))"


async def test_the_model_runs_python_on_a_workspace_file_and_reads_the_result(
    client: Client, tmp_path: Path
):
    model = ScriptedModel(
        [
            tool_call("run_python", {"code": CODE, "files": ["README.md"]}),
            tool_call("run_command", {"argv": ["wc", "-l", "README.md"]}),
            text("It has 9 words."),
        ]
    )
    agents = {"default": {"tools": ["run_python", "run_command"]}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("how many words does README.md have? write and run code")
        st = await until_state(handle, lambda s: s.pending_approvals)  # run_command is exec
        assert [p.name for p in st.pending_approvals] == ["run_command"]
        await rc.decide(client, handle.id, st.pending_approvals[0].tool_call_id, "reject", "ann",
                        reason="not needed")  # fmt: skip
        res = await handle.result()
    assert res.status == "completed"
    assert [(c.name, c.status) for c in res.tool_calls] == [
        ("run_python", "ok"),
        ("run_command", "rejected"),
    ]
    tool_msg = [m["content"] for m in model.requests[1].messages if m["role"] == "tool"][0]
    out = json.loads(tool_msg)
    expected = len((h.workspace / "README.md").read_text().split())
    assert out["exit_code"] == 0 and out["stdout"].strip() == str(expected)
    assert set(out) == {
        "exit_code",
        "stdout",
        "stderr",
        "truncated",
        "duration_ms",
        "timed_out",
        "oom",
        "files",
    }


async def test_sandbox_seconds_count_against_the_budget_and_the_cost(
    client: Client, tmp_path: Path
):
    model = ScriptedModel(
        [
            tool_call("run_python", {"code": "import time\ntime.sleep(0.3)\nprint('slept')"}),
            tool_call("run_python", {"code": "print('never runs')"}),
            text("unreachable"),
        ]
    )
    agents = {
        "default": {
            "tools": ["run_python"],
            "limits": {"max_sandbox_seconds": 0.2},
            "pricing": {"sandbox_per_second": 0.01},
        }
    }
    async with Harness(client, tmp_path, model, agents=agents) as h:
        res = await (await h.start("sleep in the sandbox")).result()
    assert res.status == "budget_exceeded", res.stopped_reason
    assert "sandbox time" in res.stopped_reason and "0.2 s" in res.stopped_reason
    assert [c.name for c in res.tool_calls] == ["run_python"]  # the second never ran
    assert res.sandbox_seconds >= 0.3
    assert res.usage.cost_usd >= 0.003  # 0.01 USD/s; the scripted model itself costs nothing


async def test_a_file_one_call_writes_is_read_by_the_next_from_the_payload_store(
    client: Client, tmp_path: Path
):
    """The second call runs where the first call's folder is gone (as on another worker): the
    file comes from the payload store, by the key the run recorded."""
    import shutil

    from activities.tools import sandbox_tools

    write = "open('out.csv', 'w').write('a,b\\n1,2\\n3,4\\n')"
    read = "print(sum(1 for _ in open('out.csv')))"

    def responder(body: dict) -> Reply:
        tools = [m for m in body["messages"] if m["role"] == "tool"]
        if not tools:
            return tool_call("run_python", {"code": write})
        if len(tools) == 1:
            shutil.rmtree(sandbox_tools._base() / "runs", ignore_errors=True)  # noqa: SLF001
            return tool_call("run_python", {"code": read, "files": ["out.csv"]})
        return text("3 lines")

    agents = {"default": {"tools": ["run_python"]}}
    async with Harness(client, tmp_path, ScriptedModel(responder=responder), agents=agents) as h:
        handle = await h.start("write a file, then count its lines")
        res = await handle.result()
        model = h.model
    assert res.status == "completed", res.stopped_reason
    first, second = (
        json.loads(m["content"]) for m in model.requests[-1].messages if m["role"] == "tool"
    )
    assert [f["name"] for f in first["files"]] == ["out.csv"]
    assert second["exit_code"] == 0 and second["stdout"].strip() == "3", second
    # the run recorded where the file is, and the call's input carried it
    events = [e async for e in handle.fetch_history_events()]
    inputs = [
        e.activity_task_scheduled_event_attributes.input
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "tool.invoke"
    ]
    assert len(inputs) == 2
    run_files = [json.loads(p.payloads[0].data)["run_files"] for p in inputs]
    assert run_files[0] == {} and list(run_files[1]) == ["out.csv"]
    assert run_files[1]["out.csv"].startswith("sha256/")
