"""Secrets never leave an activity (activities/redaction.py): history, model requests, results.

Each test runs a real run (dev server, scripted model, worker with the redacting interceptor)
whose tool puts ``OPENAI_API_KEY``'s value somewhere, then reads the real history and every
request the model server received. The worker's log file is covered by
tests/integration/test_worker_process.py; a spec ``secrets:`` entry by
tests/integration/test_inspect_audit.py (``test_a_secret_given_to_a_tool_never_reaches_...``).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.support.harness import TEST_TOOLS, Harness
from workers import history as ih
from workers.testing.scripted_model import ScriptedModel, text, tool_call

KEY = "sk-test-" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"  # 44 characters, like a real key
TOOLS = [*TEST_TOOLS, "leak_in_exception", "leak_in_cause", "secret_at"]


def pieces(secret: str, n: int = 8) -> list[str]:
    """Every ``n``-character piece of the secret (a partial leak shows one of them)."""
    return [secret[i : i + n] for i in range(len(secret) - n + 1)]


def assert_nowhere(raw: bytes, model: ScriptedModel) -> None:
    """No 8-character piece of the key in the history's bytes nor in any model request."""
    sent = json.dumps([r.body for r in model.requests])
    for p in pieces(KEY):
        assert p.encode() not in raw, f"{p!r} of the key is in the history"
        assert p not in sent, f"{p!r} of the key was sent to the model"


async def run_tool(client: Client, tmp_path: Path, call, agents=None):  # noqa: ANN001
    model = ScriptedModel([call, text("done")])
    spec = {"default": {"tools": TOOLS, **(agents or {})}}
    async with Harness(client, tmp_path, model, agents=spec) as h:
        handle = await h.start("go")
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
    raw = b"".join(ev.SerializeToString() for ev in history.events)
    return res, history, raw, model


def failures(history) -> list:  # noqa: ANN001
    return [
        ev.activity_task_failed_event_attributes.failure
        for ev in history.events
        if ev.HasField("activity_task_failed_event_attributes")
    ]


@pytest.fixture(autouse=True)
def _model_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


async def test_a_key_in_a_plain_exception_is_redacted_everywhere(client: Client, tmp_path: Path):
    res, history, raw, model = await run_tool(client, tmp_path, tool_call("leak_in_exception", {}))
    assert res.status == "completed"
    [rec] = res.tool_calls
    assert rec.status == "error" and "upstream refused key [REDACTED]" in (rec.reason or "")
    fails = failures(history)
    assert len(fails) == 1  # the last of its 2 attempts (retries are not events)
    for f in fails:
        assert f.message == "upstream refused key [REDACTED]"
        info = f.application_failure_info
        assert info.type == "RuntimeError" and not info.non_retryable  # type, retryability kept
    tool_msg = next(m for m in model.requests[-1].messages if m.get("role") == "tool")
    assert "[REDACTED]" in tool_msg["content"]
    assert_nowhere(raw, model)


async def test_a_key_in_a_nested_cause_is_redacted(client: Client, tmp_path: Path):
    res, history, raw, model = await run_tool(client, tmp_path, tool_call("leak_in_cause", {}))
    assert res.status == "completed"
    fails = failures(history)
    assert fails
    for f in fails:
        assert f.message == "the upstream call failed"
        assert f.application_failure_info.type == "ConnectionError"
        assert f.cause.message == "inner detail: key=[REDACTED]"
        assert f.cause.application_failure_info.type == "ValueError"
    assert "key=[REDACTED]" in (res.tool_calls[0].reason or "")
    assert_nowhere(raw, model)


async def test_a_key_across_the_truncation_cut_leaks_no_part(client: Client, tmp_path: Path):
    limit = 16_000
    call = tool_call("secret_at", {"position": limit - 10, "total": limit + 5_000})
    res, history, raw, model = await run_tool(client, tmp_path, call)
    assert res.status == "completed"
    [rec] = res.tool_calls
    assert rec.status == "ok"
    tool_msg = next(m for m in model.requests[-1].messages if m.get("role") == "tool")
    content = tool_msg["content"]
    assert "output truncated" in content  # it was cut ...
    assert content[limit - 10 : limit] == "[REDACTED]"  # ... after redaction, at the marker
    assert_nowhere(raw, model)


async def test_a_key_the_model_streams_in_pieces_is_redacted_whole(
    client: Client, tmp_path: Path
) -> None:
    from workers import client as rc

    answer = f"The key is {KEY}, and that is all."
    model = ScriptedModel([text(answer).with_chunk_delay(0.02)], chunk_chars=5)
    async with Harness(client, tmp_path, model, worker=False) as h:
        handle = await h.start("what is the key")
        # follow before a worker runs the first workflow task, so the run knows it is watched
        # and its model step streams (as tests/integration/test_live_stream.py does)
        watching = asyncio.ensure_future(_collect(rc.follow(client, handle.id)))
        await asyncio.sleep(0.5)
        await h.start_worker()
        events = await asyncio.wait_for(watching, timeout=60)
        res = await handle.result()
        history = await ih.fetch_history(client, handle.id)
    deltas = [e["delta"] for e in events if e["type"] == "text_delta"]
    assert model.requests[0].body.get("stream") is True  # watched: streamed in batches
    assert len(deltas) > 1
    assert "".join(deltas) == "The key is [REDACTED], and that is all." == res.output
    raw = b"".join(ev.SerializeToString() for ev in history.events)
    for p in pieces(KEY, 4):
        assert not any(p in d for d in deltas), f"{p!r} of the key was streamed"
    for p in pieces(KEY):
        assert p.encode() not in raw, f"{p!r} of the key is in the history"


async def _collect(stream: Any) -> list[dict[str, Any]]:
    return [ev async for ev in stream]


async def test_a_key_streamed_through_the_live_channel_is_redacted_whole(
    client: Client, tmp_path: Path
) -> None:
    from tests.support.live import read_approving
    from workers.live_reader import run_events

    secret = b"redaction-live-secret"
    answer = f"The key is {KEY}, and that is all."
    # a call that waits for approval first: the reader surely watches when the reply starts
    script = [tool_call("deploy", {"target": "staging"}), text(answer).with_chunk_delay(0.02)]
    model = ScriptedModel(script, chunk_chars=5)
    async with Harness(client, tmp_path, model, live="127.0.0.1:0", live_secret=secret) as h:
        handle = await h.start("what is the key")
        events = await read_approving(
            run_events(client, handle.id, secret=secret), client, handle.id
        )
        res = await handle.result()
    live = [e["delta"] for e in events if e["type"] == "text_delta" and e.get("live")]
    deltas = [e["delta"] for e in events if e["type"] == "text_delta"]
    assert model.requests[-1].body.get("stream") is True  # watched on the channel: streamed
    assert len(live) > 1
    assert "".join(deltas) == "The key is [REDACTED], and that is all." == res.output
    for p in pieces(KEY, 4):
        assert not any(p in d for d in deltas), f"{p!r} of the key was streamed"
