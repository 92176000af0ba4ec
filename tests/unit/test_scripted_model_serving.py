"""The scripted model server, driven by the real ``openai`` client: responders, concurrency, recorded
requests, streaming, construction and its command line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.openai_client import TOOLS, ask, assistant_param, client_for, function_call
from workers.testing.scripted_model import (
    Reply,
    ScriptedModel,
    call_tool_then_answer,
    error,
    text,
    tool_call,
    tool_calls,
)

REPO = Path(__file__).resolve().parents[2]


async def test_responder_mode_runs_a_tool_loop():
    seen: list[int] = []

    def responder(request: dict) -> Reply:
        seen.append(len(request["messages"]))
        return call_tool_then_answer("list_files", {"path": "/"}, "all done")(request)

    with ScriptedModel(responder=responder) as m:
        async with client_for(m) as client:
            messages: list[ChatCompletionMessageParam] = [
                {"role": "user", "content": "list the files"}
            ]
            first = await client.chat.completions.create(model="x", messages=messages, tools=TOOLS)
            call = function_call(first.choices[0].message)
            assert call.function.name == "list_files"
            messages += [
                assistant_param(first.choices[0].message),
                {"role": "tool", "tool_call_id": call.id, "content": "a.txt"},
            ]
            second = await client.chat.completions.create(model="x", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "all done"
    assert seen == [1, 3]


async def test_async_responder_and_responder_failure():
    async def responder(request: dict) -> Reply | str:
        await asyncio.sleep(0)
        if request["messages"][0]["content"] == "boom":
            raise KeyError("nope")
        return "from async"

    with ScriptedModel(responder=responder) as m:
        async with client_for(m) as client:
            assert (await ask(client)).choices[0].message.content == "from async"
            with pytest.raises(openai.InternalServerError) as info:
                await ask(client, "boom")
    assert "KeyError" in info.value.message


async def test_per_conversation_scripts_under_concurrency():
    scripts = {f"[run-{i}]": [tool_call("step", {"run": i}), text(f"answer {i}")] for i in range(4)}

    async def conversation(client: openai.AsyncOpenAI, i: int) -> str | None:
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": "you are a test"},
            {"role": "user", "content": f"[run-{i}] do the thing"},
        ]
        first = await client.chat.completions.create(model="x", messages=messages)
        call = function_call(first.choices[0].message)
        assert json.loads(call.function.arguments) == {"run": i}
        messages += [
            assistant_param(first.choices[0].message),
            {"role": "tool", "tool_call_id": call.id, "content": "ok"},
        ]
        second = await client.chat.completions.create(model="x", messages=messages)
        return second.choices[0].message.content

    with ScriptedModel(scripts=scripts, latency=0.05) as m:
        async with client_for(m) as client:
            answers = await asyncio.gather(*(conversation(client, i) for i in range(4)))
            with pytest.raises(openai.InternalServerError) as info:
                await ask(client, "no marker here")
    assert answers == [f"answer {i}" for i in range(4)]
    body = info.value.body
    assert isinstance(body, dict) and body["code"] == "no_script_for_conversation"
    assert m.remaining == 0
    # Tool call ids are unique across conversations.
    ids = [
        r.messages[-1]["tool_call_id"] for r in m.requests if r.messages[-1].get("role") == "tool"
    ]
    assert len(set(ids)) == 4


async def test_delays_overlap_for_concurrent_requests():
    with ScriptedModel(default=text("slow", delay=0.5)) as m:
        async with client_for(m) as client:
            await ask(client, "warm up the connection pool")
            start = time.monotonic()
            results = await asyncio.gather(*(ask(client, f"req {i}") for i in range(5)))
            elapsed = time.monotonic() - start
    assert [r.choices[0].message.content for r in results] == ["slow"] * 5
    assert 0.5 <= elapsed < 2.0, elapsed
    concurrent = m.requests[1:]
    replied = [r.replied_at for r in concurrent if r.replied_at is not None]
    assert len(replied) == len(concurrent)
    # Every request arrived before the first one was answered: they were all in flight together.
    assert max(r.received_at for r in concurrent) < min(replied)
    assert all(r.duration is not None and r.duration >= 0.5 for r in concurrent)


async def test_latency_applies_to_every_reply():
    with ScriptedModel([text("a"), error(503)], latency=0.2) as m:
        async with client_for(m) as client:
            await ask(client)
            with pytest.raises(openai.InternalServerError):
                await ask(client)
    assert all(r.duration is not None and r.duration >= 0.2 for r in m.requests)


async def test_many_concurrent_requests_with_responder():
    responder = call_tool_then_answer("noop")
    with ScriptedModel(responder=responder, latency=0.3) as m:
        async with client_for(m) as client:
            start = time.monotonic()
            results = await asyncio.gather(*(ask(client, f"run {i}") for i in range(300)))
            elapsed = time.monotonic() - start
    assert all(r.choices[0].message.tool_calls[0].function.name == "noop" for r in results)
    assert m.count == 300
    assert len({r.choices[0].message.tool_calls[0].id for r in results}) == 300
    assert elapsed < 10.0, elapsed


async def test_recorded_requests_contain_tools_and_messages():
    with ScriptedModel([text("ok")]) as m:
        with pytest.raises(LookupError):
            m.last_messages()
        async with client_for(m) as client:
            await client.chat.completions.create(
                model="gpt-test",
                messages=[
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hello"},
                ],
                tools=TOOLS,
                temperature=0.1,
            )
    assert m.count == 1
    [req] = m.requests
    assert req.index == 0
    assert req.body["model"] == "gpt-test"
    assert req.body["temperature"] == 0.1
    assert req.tools == TOOLS
    assert m.last_messages() == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello"},
    ]
    assert req.headers["authorization"] == "Bearer test"
    assert req.replied_at is not None and req.received_at <= req.replied_at
    assert req.reply == text("ok")


async def test_streamed_reply_splits_text_and_tool_calls_across_chunks():
    reply = tool_calls(
        [("read_file", {"path": "README.md"}), ("list_files", {"path": "."})],
        content="Let me look.",
    )
    with ScriptedModel([reply], chunk_chars=3) as m:
        async with client_for(m) as client:
            stream = await ask(client, stream=True, stream_options={"include_usage": True})
            chunks = [c async for c in stream]
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(texts) > 1 and "".join(texts) == "Let me look."
    args: dict[int, str] = {}
    names: dict[int, str] = {}
    for c in chunks:
        for tc in (c.choices[0].delta.tool_calls if c.choices else None) or []:
            args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
            if tc.function.name:
                names[tc.index] = tc.function.name
    assert names == {0: "read_file", 1: "list_files"}
    assert json.loads(args[0]) == {"path": "README.md"} and json.loads(args[1]) == {"path": "."}
    assert sum(1 for c in chunks if c.choices and len(c.choices[0].delta.tool_calls or []) > 0) > 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0


async def test_streamed_reply_without_usage_when_not_asked_or_disabled():
    with ScriptedModel([text("abc"), text("def")], stream_usage=False) as m:
        async with client_for(m) as client:
            plain = [c async for c in await ask(client, stream=True)]
            asked = [
                c
                async for c in await ask(
                    client, stream=True, stream_options={"include_usage": True}
                )
            ]
    assert all(c.usage is None for c in plain + asked)
    assert [r.status for r in m.requests] == [200, 200]


async def test_models_endpoint():
    async with ScriptedModel(model="my-model") as m:
        async with client_for(m) as client:
            models = await client.models.list()
    assert [model.id for model in models.data] == ["my-model"]


def test_invalid_construction():
    with pytest.raises(ValueError):
        ScriptedModel([text("a")], responder=lambda r: text("b"))
    with pytest.raises(ValueError):
        ScriptedModel(responder=lambda r: text("b"), default=text("c"))
    with pytest.raises(ValueError):
        ScriptedModel(latency=-1)
    with pytest.raises(TypeError):
        ScriptedModel([42])  # pyright: ignore[reportArgumentType] - not a Reply on purpose: the TypeError is the point
    with pytest.raises(ValueError):
        error(200)
    with pytest.raises(ValueError):
        text("x", delay=-0.1)
    with pytest.raises(TypeError):
        tool_call("x", 3)  # pyright: ignore[reportArgumentType] - bad arguments on purpose: the TypeError is the point
    assert text("x").with_delay(0.25).delay == 0.25


def test_cli_serves_a_tool_then_answer_responder():
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.testing.scripted_model", "--port", "0", "--tool", "ls"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        assert "serving" in line, line + proc.stderr.read()
        base_url = line.split(" at ")[1].split()[0]
        client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0)
        first = client.chat.completions.create(
            model="x", messages=[{"role": "user", "content": "go"}]
        )
        call = function_call(first.choices[0].message)
        assert call.function.name == "ls"
        second = client.chat.completions.create(
            model="x",
            messages=[
                {"role": "user", "content": "go"},
                assistant_param(first.choices[0].message),
                {"role": "tool", "tool_call_id": call.id, "content": "a"},
            ],
        )
        assert second.choices[0].message.content == "done"
        client.close()
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "stopped after 2 requests" in out
