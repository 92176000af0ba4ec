"""An agent run that writes and runs code in the sandbox (issue #22)."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import Client

from tests.harness import Harness, until_state
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, text, tool_call

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
