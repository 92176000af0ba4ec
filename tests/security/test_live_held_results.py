"""A held call's result handed to the live channel before the step's text
(``activities.streaming.hand_live``): what leaves the worker there is redacted as the history."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
from temporalio.client import Client

from tests.support.harness import Harness
from tests.support.live import read_approving
from workers.live_reader import run_events
from workers.testing.scripted_model import ScriptedModel, text, tool_call

LIVE_SECRET = b"live-held-results-secret"


async def test_a_spec_secret_in_a_held_calls_live_result_is_redacted(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, value = f"TEST_SECRET_{secrets.token_hex(4).upper()}", "tok-" + secrets.token_hex(16)
    monkeypatch.setenv(name, value)
    model = ScriptedModel(
        [
            tool_call("deploy", {"target": "staging"}),  # approved by the reader: it watches
            tool_call("echo_env", {"name": name}),
            text("done").with_chunk_delay(0.03),
        ]
    )
    agents = {
        "default": {"secrets": [name], "tools": ["deploy", {"name": "echo_env", "local": True}]}
    }
    async with Harness(
        client, tmp_path, model, agents=agents, live="127.0.0.1:0", live_secret=LIVE_SECRET
    ) as h:
        handle = await h.start("deploy, then tell me")
        events = await read_approving(
            run_events(client, handle.id, secret=LIVE_SECRET), client, handle.id
        )
        res = await handle.result()
    assert res.status == "completed" and os.environ[name] == value
    held = [e for e in events if e["type"] == "tool_finished" and e.get("live")]
    assert [e["result"] for e in held] == [f"{name} is [REDACTED]"]  # it went out live
    assert value not in json.dumps(events)
