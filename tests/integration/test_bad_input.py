"""Bad input through the public surfaces ends cleanly: a clear status or error, and never a
``WorkflowTaskFailed`` event in the run's history (a workflow task never fails over what a client
or a model sends).

Already covered elsewhere, and not repeated here:

* unknown agent, a spec field out of range: ``test_agent_loop.py::
  test_invalid_spec_ends_failed_naming_the_field`` (this file adds the other invalid spec files);
* unauthorised principals, unknown and stale call ids through ``decide`` and the signals:
  ``test_people.py::test_duplicate_stale_and_unauthorised_decisions`` (this file adds malformed
  ``decide`` payloads and checks the history);
* a model answering 401, 429, or 500 "could not parse" forever: ``test_agent_loop.py``;
* unknown tool, invalid and non-JSON tool arguments: ``test_agent_loop.py::
  test_tool_error_unknown_tool_and_invalid_arguments_reach_the_model``;
* tool output over 2 MiB with external payload storage: ``test_storage.py``;
* start input and empty or null signal payloads: the ``house`` tests (workflow decoding).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from tests.support.harness import TEST_TOOLS, Harness, until_state
from workers import client as rc
from workers.testing.scripted_model import (
    ScriptedModel,
    error,
    garbage,
    text,
    tool_call,
    tool_calls,
)
from workflows.models import RunResult

MiB = 1024 * 1024


async def no_workflow_task_failed(handle: Any) -> None:
    """Assert the run's history (all of it) has no WorkflowTaskFailed event."""
    events = [ev async for ev in handle.fetch_history_events()]
    failed = [ev for ev in events if ev.HasField("workflow_task_failed_event_attributes")]
    assert not failed, failed[0].workflow_task_failed_event_attributes.failure.message


async def run_clean(h: Harness, input: str = "go", **kw: Any) -> RunResult:
    handle = await h.start(input, **kw)
    res = await handle.result()
    await no_workflow_task_failed(handle)
    return res


# ------------------------------------------------------------------ spec files


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("agents: [unclosed\n", "YAML"),
        ("- just\n- a list\n", "mapping"),
        ("agents:\n  default:\n    model: m\n    no_such_field: 1\n", "no_such_field"),
        ("agents:\n  default:\n    tools: [no_such_tool]\n", "no_such_tool"),
        ("agents:\n  default:\n    workspace: /no/such/folder\n", "not a directory"),
        ("agents:\n  default:\n    limits: {max_turns: lots}\n", "max_turns"),
    ],
    ids=["yaml", "not-a-mapping", "unknown-field", "unknown-tool", "no-workspace", "bad-type"],
)
async def test_invalid_spec_file_ends_failed_naming_the_problem(
    client: Client, tmp_path: Path, content: str, expected: str
):
    model = ScriptedModel([text("unused")])
    bad = tmp_path / "bad.yml"
    bad.write_text(content)
    async with Harness(client, tmp_path, model) as h:
        res = await run_clean(h, spec_file=str(bad))
        missing = await run_clean(h, spec_file=str(tmp_path / "missing.yml"))
    assert res.status == "failed" and expected.lower() in (res.error or "").lower(), res.error
    assert missing.status == "failed" and "missing.yml" in (missing.error or "")
    assert model.count == 0


# ------------------------------------------------------------------ decide payloads

GATED = {"default": {"policy": {"approvers": ["alice"]}}}


async def test_malformed_decide_payloads_are_refused_and_change_nothing(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}, id="call_dep"), text("done")])
    async with Harness(client, tmp_path, model, agents=GATED) as h:
        handle = await h.start("deploy")
        await until_state(handle, lambda s: bool(s.pending_approvals))
        for payload in (
            {"tool_call_id": "call_dep", "decision": "maybe", "principal_id": "alice"},
            {"tool_call_id": "call_dep", "principal_id": "alice"},  # no decision
            {"tool_call_id": 42, "decision": "approve", "principal_id": "alice"},
            {"tool_call_id": "call_dep", "decision": "approve", "arguments": "not an object"},
            ["call_dep", "approve"],
        ):
            with pytest.raises(WorkflowUpdateFailedError):
                await handle.execute_update("decide", payload)
        st = await until_state(handle, lambda s: bool(s.pending_approvals))
        assert st.status == "awaiting_approval" and not st.decisions
        await rc.decide(client, handle.id, "call_dep", "approve", "alice")
        res = await handle.result()
        await no_workflow_task_failed(handle)
    assert res.status == "completed" and res.tool_calls[0].status == "ok"


# ------------------------------------------------------------------ model answers

EMPTY_CHOICES = json.dumps(
    {"id": "x", "object": "chat.completion", "created": 0, "model": "scripted", "choices": []}
)


@pytest.mark.parametrize(
    ("reply", "status", "expected"),
    [
        (error(500, {"error": {"message": "upstream exploded"}}), "failed", "upstream exploded"),
        (garbage("<html>this is not JSON</html>"), "failed", "could not be parsed"),
        (garbage(EMPTY_CHOICES), "failed", "could not be parsed"),
        (garbage("", status=200), "failed", "could not be parsed"),
    ],
    ids=["http-500", "non-json", "empty-choices", "empty-body"],
)
async def test_a_broken_model_answer_forever_ends_the_run_failed(
    client: Client, tmp_path: Path, reply: Any, status: str, expected: str
):
    model = ScriptedModel(default=reply)
    agents = {"default": {"model_max_attempts": 2, "max_parse_failures": 1}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        res = await run_clean(h)
    assert res.status == status
    assert expected in f"{res.stopped_reason} {res.error}", (res.stopped_reason, res.error)
    assert model.count <= 6  # bounded: no crash loop


async def test_a_3_mib_model_answer_ends_cleanly(client: Client, tmp_path: Path):
    # streamed in 64 KiB chunks: at the default 4 characters a chunk, streaming 3 MiB takes the
    # scripted server and the client longer than the model step's 120 s timeout (the run then
    # ends failed with "activity StartToClose timeout" after its attempts: clean, but slow)
    model = ScriptedModel(default=text("x" * (3 * MiB)), chunk_chars=64 * 1024)
    async with Harness(client, tmp_path, model, agents={"default": {"model_max_attempts": 2}}) as h:
        res = await run_clean(h)
    # With this client's plain converter the reply cannot be recorded: the run fails saying so
    # (with external payload storage it completes: test_storage.py). Never a stuck run.
    assert res.status == "failed" and "PayloadsTooLarge" in (res.error or ""), res.error
    assert model.count == 2  # the spec's model_max_attempts, then the end


# ------------------------------------------------------------------ tool calls

ESCAPES = [
    "../outside.txt",
    "../../etc/passwd",
    "/etc/passwd",
    "~/outside.txt",
    "~root/.ssh/id_rsa",
    "a/../../outside.txt",
    "./../outside.txt",
    "sub/../../../outside.txt",
    "link_out/secret.txt",
    "link_out",
    "link_file",
    "nul\x00byte.txt",
    ".tool-ledger/x.json",
    "sub/../.tool-ledger/x.json",
    "//etc/passwd",
    "..",
    "../ws2/stolen.txt",
]


async def test_workspace_escapes_bad_tool_json_and_huge_output_end_cleanly(
    client: Client, tmp_path: Path
):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    calls: list[tuple[str, Any]] = []
    for path in ESCAPES:
        calls += [
            ("read_file", {"path": path}),
            ("write_file", {"path": path, "content": "pwned", "overwrite": True}),
            ("list_files", {"path": path}),
        ]
    calls += [
        ("read_file", "{not json"),
        ("read_file", "[1, 2, 3]"),
        ("read_file", '{"path": 42}'),
        ("big_output", {"chars": 3 * MiB}),
    ]
    model = ScriptedModel([tool_calls(calls), text("done")])
    agents = {"default": {"tools": [*TEST_TOOLS, "big_output"], "policy": {"default": "allow"}}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        (h.workspace / "link_out").symlink_to(outside, target_is_directory=True)
        (h.workspace / "link_file").symlink_to(outside / "secret.txt")
        res = await run_clean(h)
    assert res.status == "completed"
    escapes, bad_json, big = res.tool_calls[:-4], res.tool_calls[-4:-1], res.tool_calls[-1]
    assert all(c.status == "error" for c in escapes), [
        (c.name, c.arguments) for c in escapes if c.status != "error"
    ]
    assert all(c.status == "error" for c in bad_json)
    assert big.status == "ok" and big.result_chars == 3 * MiB
    tool_msgs = [m for m in model.requests[1].messages if m["role"] == "tool"]
    assert all("top secret" not in m["content"] for m in tool_msgs)
    assert "output truncated" in tool_msgs[-1]["content"] and len(tool_msgs[-1]["content"]) < 17_000
    assert (outside / "secret.txt").read_text() == "top secret"
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "ws2").exists()
