"""The agent loop end to end: real dev server, scripted model over HTTP, real worker."""

from __future__ import annotations

import json

from tests.harness import Harness
from tests.support_tools import journal_events
from workers.testing.scripted_model import ScriptedModel, error, text, tool_call, tool_calls


async def test_tool_call_then_answer(client, tmp_path):
    model = ScriptedModel([tool_call("read_file", {"path": "README.md"}), text("The answer is 42.")])
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("what is the answer in README.md?")
    assert res.status == "completed"
    assert res.output == "The answer is 42."
    assert res.turns == 2
    assert [c.name for c in res.tool_calls] == ["read_file"]
    assert res.tool_calls[0].status == "ok"
    assert res.usage.total_tokens > 0
    # the model saw the tool result, in the OpenAI tool message format
    second = model.requests[1].messages
    assert second[-1]["role"] == "tool"
    assert "the answer is 42" in second[-1]["content"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "read_file"
    # and the tool schemas were sent
    names = {t["function"]["name"] for t in model.requests[0].tools}
    assert {"read_file", "calculator"} <= names
