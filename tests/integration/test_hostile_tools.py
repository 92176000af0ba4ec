"""What a tool can do to a run (a probe, 2026-11-27): results that cannot be sent, tools that never
return, MCP servers that flood, freeze or die, sandboxed programs that flood their output. Each
ends as a named outcome for the model, run once, and leaves the worker able to take more work."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from tests.support.harness import TEST_TOOLS, Harness
from tests.support.history import no_task_failed
from tests.support.tools import journal_events
from workers.testing.scripted_model import ScriptedModel, text, tool_calls


def tool_messages(model: ScriptedModel, index: int) -> list[str]:
    """Contents of the tool messages the model saw in request ``index``."""
    return [m["content"] for m in model.requests[index].messages if m["role"] == "tool"]


async def test_results_that_cannot_be_sent_are_named_and_the_tool_runs_once(
    client: Client, tmp_path: Path
):
    kinds = ["surrogate", "bytes", "deep", "cycle"]
    model = ScriptedModel([tool_calls([("odd_result", {"kind": k}) for k in kinds]), text("ok")])
    agents = {"default": {"tools": [*TEST_TOOLS, "odd_result"], "policy": {"default": "allow"}}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("go")
        res = await handle.result()
        await no_task_failed(handle)
    assert res.status == "completed"
    ran = [e["kind"] for e in journal_events(h.journal) if e["tool"] == "odd_result"]
    assert sorted(ran) == sorted(kinds)  # once each: no retry of a tool that already ran
    surrogate, raw, deep, cycle = tool_messages(model, 1)
    assert surrogate == "half \ufffd a pair"
    assert raw == "\ufffd\ufffd ok \ufffd("
    assert deep == "Error: odd_result ran, but its result nests too deeply to be turned into text"
    assert cycle.startswith("Error: odd_result ran, but its result cannot be turned into text")
    assert [c.status for c in res.tool_calls] == ["ok", "ok", "error", "error"]
