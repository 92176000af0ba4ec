"""Cases from real runs and replays with recorded tools (issue #40, docs/evaluations.md).

A run reads a file and writes another after an approval; ``agentctl eval capture`` turns it into
a case; ``--replay-tools`` runs the case again with every tool call answered from the recording:
nothing is written, the same trajectory scores, and a changed prompt shows where it left the
recording. The run's records keep the model's arguments, with what the tool ran with beside them.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from temporalio.client import Client

from activities.evals.contracts import Case, SuiteProgress, SuiteRequest, Variant
from activities.evals.report import build_report
from tests.support.cli import agentctl, agentctl_env
from tests.support.encryption import FIXTURE_KEYS
from tests.support.harness import Harness, until_state
from workers import client as rc
from workers.config import Settings
from workers.eval_client import start_suite
from workers.history import CaptureError, capture_run
from workers.payloads.converter import build_data_converter
from workers.testing.scripted_model import ScriptedModel, text, tool_call, tool_calls

AGENTS = {
    "default": {"system_prompt": "You copy files."},
    "shouty": {"system_prompt": "You copy files. SHOUT."},
}


def _tool_texts(body: dict[str, Any]) -> list[str]:
    return [str(m.get("content")) for m in body["messages"] if m["role"] == "tool"]


def copier(body: dict[str, Any]):
    """Read in.txt, write what it said to out.txt (the shouty prompt adds '!'), then answer."""
    told = _tool_texts(body)
    shouty = "SHOUT" in body["messages"][0]["content"]
    if not told:
        return tool_call("read_file", {"path": "in.txt"})
    if len(told) == 1:
        said = told[0].strip().splitlines()[-1].split("|")[-1].strip()
        return tool_call(
            "write_file", {"path": "out.txt", "content": said + ("!" if shouty else "")}
        )
    return text("Copied in.txt to out.txt.")


async def _copy_run(client: Client, h: Harness) -> Any:
    """The live run: read, then write after a person approves; returns its handle."""
    handle = await h.start("Copy in.txt to out.txt.")
    st = await until_state(handle, lambda s: s.status == "awaiting_approval")
    [pending] = st.pending_approvals
    assert pending.arguments == {"path": "out.txt", "content": "hello"}
    await rc.decide(client, handle.id, pending.tool_call_id, "approve", "alice")
    return handle


async def test_capture_then_replay_writes_nothing_and_shows_drift(
    client: Client, tmp_path: Path, dev_server_address: str
) -> None:
    async with Harness(client, tmp_path, ScriptedModel(responder=copier), agents=AGENTS) as h:
        (h.workspace / "in.txt").write_text("hello\n")
        handle = await _copy_run(client, h)
        res = await handle.result()
        assert res.status == "completed", res.error
        assert (h.workspace / "out.txt").read_text() == "hello"
        events = [ev async for ev in rc.follow(client, handle.id)]

        # what the model asked, and beside it what the tool ran with (its default filled in)
        read, write = res.tool_calls
        assert write.arguments == {"path": "out.txt", "content": "hello"}
        assert write.run_arguments == {"path": "out.txt", "content": "hello", "overwrite": False}
        assert read.arguments == {"path": "in.txt"} and read.run_arguments is not None
        [finished] = [
            e for e in events if e["type"] == "tool_finished" and e["name"] == "write_file"
        ]
        assert finished["arguments"] == write.arguments
        assert finished["run_arguments"] == write.run_arguments

        # capture, through the command line
        cases_file = tmp_path / "cases.jsonl"
        env = agentctl_env(h, dev_server_address)
        got = await agentctl("eval", "capture", handle.id, "--to", str(cases_file), env=env)
        assert got.returncode == 0, got.stderr
        [line] = cases_file.read_text().splitlines()
        case = Case.model_validate_json(line)
        assert case.id == handle.id and case.input == "Copy in.txt to out.txt."
        assert case.expected == res.output
        assert case.metadata["spec_hash"] == res.spec_hash and case.metadata["agent"] == "default"
        assert case.recording is not None
        r_read, r_write = case.recording.calls
        assert (r_read.name, r_read.status) == ("read_file", "ok") and "hello" in r_read.result
        assert r_write.arguments == {"path": "out.txt", "content": "hello"}
        assert r_write.run_arguments == write.run_arguments and r_write.status == "ok"
        assert "out.txt" in r_write.result

        # the world changes; the replay still sees the recorded one, and writes nothing
        (h.workspace / "out.txt").unlink()
        (h.workspace / "in.txt").write_text("changed\n")
        asked_before = h.model.count
        req = SuiteRequest(
            dataset="captured",
            cases=[case],
            variants=[
                Variant(name="default", agent="default"),
                Variant(name="shouty", agent="shouty"),
            ],
            replay_tools=True,
        )
        suite = await start_suite(client, req, task_queue=h.task_queue)
        prog: SuiteProgress = await asyncio.wait_for(suite.result(), timeout=120)

    assert not (h.workspace / "out.txt").exists()  # no write, in either variant
    by = {r.variant: r for r in prog.records}
    same, drifted = by["default"], by["shouty"]
    assert same.passed, same.scores
    [follows] = [s for s in same.scores if s.name == "recording"]
    assert follows.passed and follows.value == 1.0
    assert [c["recorded"] for c in same.tool_calls] == ["answered", "answered"]
    assert [c["arguments"] for c in same.tool_calls] == [c.arguments for c in case.recording.calls]
    assert prog.decisions == 2  # each variant's write waited for an approval the suite gave
    # the replay's model was told the recorded file, not the changed one
    replay_reqs = h.model.requests[asked_before:]
    told = [t for r in replay_reqs for t in _tool_texts(r.body)]
    assert any("hello" in t for t in told) and not any("changed" in t for t in told)

    assert not drifted.passed
    [left] = [s for s in drifted.scores if s.name == "recording"]
    assert left.passed is False and left.value == 0.5
    assert left.detail.startswith("left the recording at call 2 (turn 2): write_file(")
    assert "hello!" in left.detail and "1 call(s) the recording did not answer" in left.detail
    assert [c["recorded"] for c in drifted.tool_calls] == ["answered", "unmatched"]
    report = build_report(prog)
    assert report["variants"]["default"]["cases"][case.id]["left_recording"] == []
    assert report["variants"]["shouty"]["cases"][case.id]["left_recording"] == [left.detail]
    json.dumps(report)


async def test_an_encrypted_run_is_captured_only_with_its_key(
    client: Client, tmp_path: Path
) -> None:
    settings = Settings(payload_dir=str(tmp_path / "payloads"), encryption_keys=FIXTURE_KEYS)
    enc = await Client.connect(
        client.service_client.config.target_host,
        namespace=client.namespace,
        data_converter=build_data_converter(settings),
    )
    secret = "OKAPI-CAPTURED-5521"
    model = ScriptedModel([tool_call("read_file", {"path": "s.txt"}), text(f"It says {secret}.")])
    async with Harness(enc, tmp_path, model) as h:
        (h.workspace / "s.txt").write_text(secret + "\n")
        handle = await h.start("Read s.txt")
        res = await handle.result()
    assert res.status == "completed"
    case = await capture_run(enc, handle.id, answer="reference")
    assert case.expected is None and secret in case.metadata["reference"]
    assert case.recording is not None and secret in case.recording.calls[0].result
    try:
        await capture_run(client, handle.id)  # the plain converter: no key
    except CaptureError as e:
        assert "encrypted" in str(e) and secret not in str(e)
    else:
        raise AssertionError("captured an encrypted run without its key")


def test_the_stored_replay_ran_no_tool_and_records_what_the_model_asked() -> None:
    """tests/histories/replayed.json (tests/record_histories.py): no ``tool.invoke`` at all."""
    from workers.history import audit, load_history_file
    from workers.history._walk import patch_ids
    from workflows.versions import PATCH_MODEL_ARGUMENTS

    history = load_history_file(Path(__file__).parents[1] / "histories" / "replayed.json")
    kinds = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert kinds == ["model.complete"] * 3
    assert PATCH_MODEL_ARGUMENTS in set(patch_ids(history.events))
    res = audit(history).result
    assert res is not None and res.status == "completed"
    got = [(c.name, c.status, c.recorded, c.arguments) for c in res.tool_calls]
    assert got == [
        ("read_file", "ok", "answered", {"path": "notes.txt"}),
        ("deploy", "ok", "answered", {"target": "prod"}),
        ("record", "error", "unmatched", {"label": "new"}),
    ]
    assert res.decisions[0].principal_id == "alice"


async def test_an_unmatched_call_is_an_error_unless_the_recording_allows_it_live(
    client: Client, tmp_path: Path
) -> None:
    from activities.evals.contracts import RecordedCall, Recording
    from tests.support.tools import journal_events
    from workflows.models import RunRequest

    recorded = RecordedCall(name="record", arguments={"label": "old"}, result="recorded old")
    model = ScriptedModel(
        [
            tool_calls([("record", {"label": "old"}), ("record", {"label": "new"})]),
            text("done"),
        ]
        * 2
    )
    journal = tmp_path / "journal.jsonl"
    async with Harness(client, tmp_path, model) as h:
        results = []
        for unmatched in ("error", "live"):
            handle = await rc.start_run(
                client,
                RunRequest(
                    input="record both",
                    recorded_tools=Recording(calls=[recorded], unmatched=unmatched),
                ),
                task_queue=h.task_queue,
            )
            results.append(await handle.result())
            # the recorded call never runs; the unmatched one only where the recording allows
            ran = [e["label"] for e in journal_events(journal)]
            assert ran == ([] if unmatched == "error" else ["new"])
    strict, live = results
    assert [(c.recorded, c.status) for c in strict.tool_calls] == [
        ("answered", "ok"),
        ("unmatched", "error"),
    ]
    assert [(c.recorded, c.status) for c in live.tool_calls] == [("answered", "ok"), ("live", "ok")]
    told = [m for m in model.requests[1].body["messages"] if m["role"] == "tool"]
    assert told[0]["content"] == "recorded old" and "replay of a recorded run" in told[1]["content"]
