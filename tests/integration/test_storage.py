"""Large payloads go to external storage: real dev server, scripted model, real worker.

The session's ``env`` client uses the plain pydantic converter, so each test wraps the same
service connection in a client whose converter stores payloads in its own folder
(:func:`storage_client`) and hands that client to the Harness.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from activities.contracts import MODEL_COMPLETE, TOOL_INVOKE
from activities.tools import tool
from tests.support.harness import TEST_TOOLS, Harness
from workers.config import Settings
from workers.console.auth import Authenticator
from workers.local.dev_server import (
    DevServerConfig,
    dev_server_args,
    find_executable,
    temporal_binary,
)
from workers.payloads.codec_server import default_allowed_origins, start_codec_server
from workers.payloads.converter import build_data_converter, is_reference
from workers.testing.scripted_model import ScriptedModel, text, tool_call

MIB = 1024 * 1024
BLOB_TOOL = "storage_blob"


def blob(size: int, tag: str) -> str:
    """``size`` characters: the tag, then a repeating pattern (not one repeated character)."""
    unit = "".join(chr(ord("a") + (i * 7) % 26) for i in range(997)) + "\n"
    body = tag + "|" + unit * (size // len(unit) + 1)
    return body[:size]


@tool(name=BLOB_TOOL, timeout_seconds=60)
def storage_blob(size: int, tag: str) -> str:
    """Return a long text (for the external-storage tests).

    Args:
        size: number of characters to return.
        tag: text the output starts with.
    """
    return blob(size, tag)


def agents(**extra: Any) -> dict[str, dict[str, Any]]:
    return {
        "default": {
            "tools": [*TEST_TOOLS, BLOB_TOOL],
            "max_tool_output_chars": 4_000_000,
            # no compaction: every model step must see the whole transcript
            "compaction": {"context_window": 50_000_000},
            **extra,
        }
    }


def storage_settings(tmp_path: Path, **kw: Any) -> Settings:
    return Settings(state_dir=str(tmp_path / "state"), **kw)


def storage_client(env: WorkflowEnvironment, settings: Settings) -> Client:
    """A client on the session's server connection, with the runtime's storage converter."""
    return Client(
        env.client.service_client,
        namespace=env.client.namespace,
        data_converter=build_data_converter(settings),
    )


# --------------------------------------------------------------------------- history analysis


def _payloads_in(msg: Message) -> Iterator[Payload]:
    """Every ``Payload`` inside a protobuf message (fields, repeated fields, maps)."""
    if isinstance(msg, Payload):
        yield msg
        return
    for fd, value in msg.ListFields():
        if fd.type != fd.TYPE_MESSAGE:
            continue
        assert fd.message_type is not None  # set on every message field
        if fd.message_type.GetOptions().map_entry:
            if fd.message_type.fields_by_name["value"].type == fd.TYPE_MESSAGE:
                for v in value.values():
                    yield from _payloads_in(v)
        elif isinstance(value, Message):
            yield from _payloads_in(value)
        else:  # repeated message field
            for v in value:
                yield from _payloads_in(v)


def history_bytes(history: WorkflowHistory) -> int:
    return sum(e.ByteSize() for e in history.events)


def bytes_per_turn(history: WorkflowHistory) -> list[int]:
    """History bytes of each turn: from one model step's scheduling to the next one's."""
    turns: list[int] = []
    for e in history.events:
        if (
            e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            and e.activity_task_scheduled_event_attributes.activity_type.name == MODEL_COMPLETE
        ):
            turns.append(0)
        if turns:
            turns[-1] += e.ByteSize()
    return turns


def scheduled_inputs(history: WorkflowHistory, activity: str) -> list[Payload]:
    return [
        e.activity_task_scheduled_event_attributes.input.payloads[0]
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity
    ]


# --------------------------------------------------------------------------- a 3 MiB tool output


async def test_tool_output_over_2_mib_reaches_the_model_and_stays_out_of_history(
    env: WorkflowEnvironment, tmp_path: Path
):
    settings = storage_settings(tmp_path)  # default threshold (64 KiB), local store
    client = storage_client(env, settings)
    size = 3 * MIB
    expected = blob(size, "big-0")
    model = ScriptedModel([tool_call(BLOB_TOOL, {"size": size, "tag": "big-0"}), text("got it")])
    async with Harness(client, tmp_path, model, agents=agents()) as h:
        handle = await h.start("produce a lot of output")
        res = await asyncio.wait_for(handle.result(), timeout=90)
        history = await handle.fetch_history()
    assert res.status == "completed", res
    assert res.output == "got it"
    assert res.tool_calls[0].status == "ok"
    assert res.tool_calls[0].result_chars == size

    # the model received the whole 3 MiB, verbatim, in the tool message
    tool_msg = model.requests[1].messages[-1]
    assert tool_msg["role"] == "tool"
    assert len(tool_msg["content"]) == size
    assert tool_msg["content"] == expected

    # ... while the history stayed small and holds references
    total = history_bytes(history)
    assert total < 200_000, total
    assert len(history.to_json()) < 300_000
    payloads = list(p for e in history.events for p in _payloads_in(e))
    refs = [p for p in payloads if is_reference(p)]
    external = sum(p.external_payloads[0].size_bytes for p in refs)
    assert external > 2 * size  # the tool's result and the second model step's transcript
    assert all(p.ByteSize() < 64 * 1024 for p in payloads)
    [tool_result] = [
        e.activity_task_completed_event_attributes.result.payloads[0]
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and e.activity_task_completed_event_attributes.result.payloads[0].ByteSize() < 1024
        and is_reference(e.activity_task_completed_event_attributes.result.payloads[0])
    ]
    assert tool_result.external_payloads[0].size_bytes > size
    assert is_reference(scheduled_inputs(history, MODEL_COMPLETE)[1])
    assert not is_reference(scheduled_inputs(history, TOOL_INVOKE)[0])  # small: inline
    print(f"\n3 MiB run: history {total} bytes, {len(refs)} references to {external} bytes")

    # the codec server turns a reference from this history back into the original JSON
    codec = await start_codec_server(
        settings,
        port=0,
        allowed_origins=default_allowed_origins("http://127.0.0.1:8233"),
        auth=Authenticator(token="t"),
    )
    try:
        ref = scheduled_inputs(history, MODEL_COMPLETE)[1]
        body = {
            "payloads": [
                {
                    "metadata": {k: base64.b64encode(v).decode() for k, v in ref.metadata.items()},
                    "data": base64.b64encode(ref.data).decode(),
                }
            ]
        }
        headers = {
            "Origin": "http://127.0.0.1:8233",
            "X-Namespace": "default",
            "Authorization": "Bearer t",
        }
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{codec.url}/decode", json=body, headers=headers) as r:
                assert r.status == 200
                assert r.headers["Access-Control-Allow-Origin"] == "http://127.0.0.1:8233"
                [decoded] = (await r.json())["payloads"]
            pre = {
                "Origin": "http://127.0.0.1:8233",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            }
            async with http.options(f"{codec.url}/decode", headers=pre) as r:
                assert r.status == 200
                assert r.headers["Access-Control-Allow-Origin"] == "http://127.0.0.1:8233"
                assert "x-namespace" in r.headers["Access-Control-Allow-Headers"].lower()
        assert base64.b64decode(decoded["metadata"]["encoding"]) == b"json/plain"
        model_input = json.loads(base64.b64decode(decoded["data"]))
        assert model_input["turn"] == 2
        assert model_input["messages"][-1]["content"] == expected

        # and the `temporal` CLI shows the real content through it
        exe = str(temporal_binary())
        out = await asyncio.to_thread(
            subprocess.run,
            [exe, "workflow", "show", "--workflow-id", handle.id, "--output", "json"]
            + ["--address", env.client.service_client.config.target_host]
            + ["--namespace", env.client.namespace, "--codec-endpoint", codec.url]
            + ["--codec-auth", "Bearer t"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        shown = json.loads(out.stdout)["events"]
        results = [
            json.loads(base64.b64decode(e[attrs]["result"]["payloads"][0]["data"]))
            for e in shown
            for attrs in ["activityTaskCompletedEventAttributes"]
            if attrs in e
        ]
        assert any(r.get("content") == expected for r in results)  # the tool's 3 MiB, not a ref
    finally:
        await codec.stop()


# --------------------------------------------------------------------------- linear history


async def _turns_run(
    env: WorkflowEnvironment, tmp_path: Path, settings: Settings, turns: int, output_chars: int
) -> list[int]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    client = storage_client(env, settings)
    script = [
        tool_call(BLOB_TOOL, {"size": output_chars, "tag": f"turn-{i}"}) for i in range(turns - 1)
    ]
    model = ScriptedModel([*script, text("done")])
    spec = agents(limits={"max_turns": turns + 5}, max_tool_output_chars=100_000)
    async with Harness(client, tmp_path, model, agents=spec) as h:
        handle = await h.start("grow the transcript")
        res = await asyncio.wait_for(handle.result(), timeout=110)
        history = await handle.fetch_history()
    assert res.status == "completed", res
    assert res.turns == turns
    # every step saw the whole, growing transcript
    assert len(model.requests[-1].messages) == 2 + 2 * (turns - 1)
    per_turn = bytes_per_turn(history)
    assert len(per_turn) == turns
    return per_turn


@pytest.mark.timeout(240)
async def test_history_grows_linearly_with_external_storage(
    env: WorkflowEnvironment, tmp_path: Path
):
    turns, chars = 30, 3000  # the transcript grows ~3 KB a turn, to ~90 KB
    with_store = await _turns_run(
        env,
        tmp_path / "a",
        storage_settings(tmp_path / "a", payload_threshold_bytes=4096),
        turns,
        chars,
    )
    first, last = sum(with_store[:10]), sum(with_store[-10:])
    print(f"\nexternal storage: per turn {with_store}; first 10 {first} B, last 10 {last} B")
    assert last <= 2 * first, (first, last)
    assert max(with_store[1:]) < 3 * chars  # each turn: a reference + one tool output inline

    # the same run with everything inline grows quadratically: the check above discriminates
    inline = await _turns_run(
        env, tmp_path / "b", storage_settings(tmp_path / "b", payload_store="none"), turns, chars
    )
    first_i, last_i = sum(inline[:10]), sum(inline[-10:])
    print(f"inline: per turn {inline}; first 10 {first_i} B, last 10 {last_i} B")
    assert last_i > 3 * first_i
    assert sum(inline) > 5 * sum(with_store)


# --------------------------------------------------------------------------- Web UI + codec


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_web_ui_serves_with_the_codec_endpoint(tmp_path: Path):
    """temporal-dev.yml's server gets --ui-codec-endpoint; the UI serves and reports it."""
    from workers.testing.env import dev_config

    shipped = dev_config()
    assert shipped.ui_codec_endpoint == "http://127.0.0.1:8234"
    cfg = shipped.model_copy(
        update={
            "port": _free_port(),
            "ui_port": _free_port(),
            "db_filename": None,
            "log_level": "error",
            "search_attributes": {},
            "dynamic_config": {},
        }
    )
    assert isinstance(cfg, DevServerConfig)
    args = dev_server_args(cfg, tmp_path)
    assert args[args.index("--ui-codec-endpoint") + 1] == "http://127.0.0.1:8234"
    assert find_executable("temporal") is not None
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 60
            while True:
                try:
                    async with http.get(f"{cfg.ui_url}/") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                assert proc.poll() is None, "the dev server exited"
                assert time.monotonic() < deadline, "the Web UI did not answer"
                await asyncio.sleep(0.2)
            async with http.get(f"{cfg.ui_url}/api/v1/settings") as r:
                assert r.status == 200
                ui_settings = await r.json(content_type=None)
        assert ui_settings["Codec"]["Endpoint"] == "http://127.0.0.1:8234"
        # the codec server's default CORS origins are this UI's (localhost and 127.0.0.1)
        assert "http://127.0.0.1:8233" in default_allowed_origins()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
