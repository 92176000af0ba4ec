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
from bench.bfcl_raw import agent_settings, load_functions, raw_request, run_raw
from workers.config import Settings
from workers.testing.scripted_model import ScriptedModel, error, text, tool_call, tool_calls

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
    assert [(c["case"], c["raw"], c["runtime"]) for c in out["per_case"]] == [
        (c.id, True, c.id != again) for c in cases
    ]
    (d,) = out["differ"]
    assert d["case"] == again and d["raw"] and not d["runtime"]
    assert "2 call(s), expected 1" in d["runtime_why"] and len(d["runtime_calls"]) == 2
    assert d["raw_call"]["name"] == d["runtime_calls"][0]["name"] and d["raw_calls_in_reply"] == 1

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


async def test_raw_path_scores_the_first_call_and_counts_refusals_and_answers_as_failures() -> None:
    cases, scorers = load_cases(2)
    cases = cases[::2] + cases[1:2]  # simple_python, multiple, live_multiple, simple_python
    exp = [(c.expected_tool_calls or [])[0] for c in cases]
    args = [{k: _literal(v) for k, v in e.arguments.items()} for e in exp]
    script = {
        cases[0].input: [tool_call(exp[0].name, {**args[0], "surplus": 1})],  # one too many
        cases[1].input: [error(500, {"error": {"message": "Failed to parse tool call"}})],
        cases[2].input: [tool_calls([(exp[2].name, args[2]), ("other", {})])],  # first scored
        cases[3].input: [text("The area is 25.")],  # an answer, no call
    }
    with ScriptedModel(scripts=script) as model:
        got = await run_raw(cases, model.base_url, "k", "scripted", scorers=scorers)
        assert model.count == 4
    assert [r.case_id for r in got] == [c.id for c in cases]
    assert not got[0].passed and "unexpected argument(s) surplus" in got[0].scores[0].detail
    assert not got[1].passed and got[1].error and "500" in got[1].error and got[1].call is None
    assert (
        got[2].passed and got[2].calls == 2 and got[2].call and got[2].call["name"] == exp[2].name
    )
    assert not got[3].passed and got[3].calls == 0 and "0 call(s)" in got[3].scores[0].detail
    assert [r.category for r in got] == [
        "simple_python",
        "multiple",
        "live_multiple",
        "simple_python",
    ]
