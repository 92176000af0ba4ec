"""BFCL straight to the model and through the runtime (issue #40 part 4), on the scripted model.

The raw path (bench/bfcl_raw.py) and an ``EvalSuite`` of ``AgentRun`` children (bench/bfcl_gap.py)
send each case to the same real HTTP server: the runtime's first model request must be the raw
request (same messages, tools byte for byte, sampling), both are scored by the same scorer, and
the gap table counts what each path passed.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from activities.evals.contracts import Case
from bench.bfcl_gap import SPEC, compare, load_cases
from bench.bfcl_raw import agent_settings, load_functions, raw_request
from workers.config import Settings
from workers.testing.scripted_model import ScriptedModel, text, tool_call

SAMPLING = ("model", "messages", "tools", "temperature", "max_tokens")


def _literal(want: Any) -> Any:
    return want["one_of"][0] if isinstance(want, dict) and "one_of" in want else want


def _responder(cases: list[Case], calls_again: str):
    """Each case's expected call, then an answer; case ``calls_again`` calls a second time."""
    by_input = {c.input: c for c in cases}

    def respond(body: dict[str, Any]):
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        case = by_input[user]
        (exp,) = case.expected_tool_calls or []
        args = {k: _literal(v) for k, v in exp.arguments.items()}
        tool_turns = sum(1 for m in body["messages"] if m["role"] == "tool")
        if tool_turns == 0 or (case.id == calls_again and tool_turns == 1):
            return tool_call(exp.name, args)
        return text("Done.")

    return respond


async def test_raw_and_runtime_send_the_same_request_and_the_gap_is_counted(
    client, tmp_path
) -> None:
    cases, scorers = load_cases(2)
    cats = [str(c.metadata["category"]) for c in cases]
    assert cats == ["simple_python"] * 2 + ["multiple"] * 2 + ["live_multiple"] * 2
    again = cases[2].id  # a `multiple` case whose run calls its tool twice
    with ScriptedModel(responder=_responder(cases, again)) as model:
        settings = Settings(
            openai_base_url=model.base_url,
            openai_api_key="test-key",
            spec_file=str(SPEC),
            task_queue=f"tq-bfcl-{uuid.uuid4().hex[:8]}",
            default_model="scripted",
            state_dir=str(tmp_path),
            workflow_sandbox=True,
        )
        out = await compare(client, settings, cases, scorers)
        requests = [r.body for r in model.requests]

    rows = {r["category"]: r for r in out["rows"]}
    assert rows["simple_python"] == {
        "category": "simple_python", "cases": 2, "raw": 2, "runtime": 2, "gap": 0
    }  # fmt: skip
    assert rows["multiple"] == {
        "category": "multiple", "cases": 2, "raw": 2, "runtime": 1, "gap": -1
    }  # fmt: skip
    assert rows["live_multiple"]["gap"] == 0 and rows["live_multiple"]["runtime"] == 2
    assert rows["all"] == {"category": "all", "cases": 6, "raw": 6, "runtime": 5, "gap": -1}
    (d,) = out["differ"]
    assert d["case"] == again and d["raw"] and not d["runtime"]
    assert "2 call(s), expected 1" in d["runtime_why"] and len(d["runtime_calls"]) == 2

    # every case: the runtime's first model request is the raw one
    settings_raw = agent_settings("bfcl", SPEC)
    assert settings_raw["temperature"] == 0
    functions = load_functions()
    for case in cases:
        want = raw_request(case, settings_raw, functions, "scripted")
        sent = [
            b
            for b in requests
            if b["messages"][1]["content"] == case.input and len(b["messages"]) == 2
        ]
        assert len(sent) == 2, case.id  # one raw request, one runtime first step
        raw, run = sorted(sent, key=lambda b: "stream" in b)
        assert {k: raw[k] for k in SAMPLING} == want
        assert {k: run.get(k) for k in SAMPLING} == want, case.id
        # byte for byte, key order included: the chat template renders the tools as JSON text
        assert json.dumps(run["tools"]) == json.dumps(want["tools"]), case.id
        assert set(run) - set(SAMPLING) <= {"stream", "stream_options"}
