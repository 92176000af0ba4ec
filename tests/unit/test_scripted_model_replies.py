"""The scripted model server, driven by the real ``openai`` client: its replies (text, tool calls, errors,
garbage) and its script."""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.openai_client import TOOLS, ask, client_for
from workers.testing.scripted_model import (
    ScriptedModel,
    ToolCall,
    error,
    garbage,
    text,
    tool_call,
    tool_calls,
)


async def test_text_reply():
    with ScriptedModel([text("hello there")], model="scripted-x") as m:
        async with client_for(m) as client:
            completion = await ask(client, "say hello, please")
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "hello there"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert completion.object == "chat.completion"
    assert completion.model == "scripted-x"
    assert completion.id.startswith("chatcmpl-")
    # "say hello, please" is 17 chars -> 5 tokens; "hello there" is 11 chars -> 3 tokens.
    assert completion.usage.prompt_tokens == 5
    assert completion.usage.completion_tokens == 3
    assert completion.usage.total_tokens == 8


def test_lifecycle_and_base_url():
    m = ScriptedModel()
    with pytest.raises(RuntimeError, match="not running"):
        _ = m.base_url
    m.start()
    try:
        assert m.port > 0
        assert m.base_url == f"http://127.0.0.1:{m.port}/v1"
        with pytest.raises(RuntimeError, match="already running"):
            m.start()
    finally:
        m.stop()
    m.stop()  # idempotent
    with pytest.raises(RuntimeError):
        _ = m.port


async def test_tool_call_reply_parsed_by_client():
    script = [tool_call("list_files", {"path": "."}), tool_call("read", "{}", id="call_custom")]
    with ScriptedModel(script) as m:
        async with client_for(m) as client:
            first = await ask(client, tools=TOOLS)
            second = await ask(client, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.id == "call_1"
    assert call.type == "function"
    assert call.function.name == "list_files"
    assert json.loads(call.function.arguments) == {"path": "."}
    assert second.choices[0].message.tool_calls[0].id == "call_custom"
    assert first.usage.completion_tokens > 0


async def test_several_tool_calls_in_one_reply():
    reply = tool_calls(
        [
            tool_call("a", {"x": 1}),
            ToolCall(name="b", arguments='{"y": 2}', id="call_b"),
            ("c", "{not json"),
        ],
        content="calling three tools",
    )
    with ScriptedModel([reply]) as m:
        async with client_for(m) as client:
            completion = await ask(client)
    message = completion.choices[0].message
    assert message.content == "calling three tools"
    assert [c.function.name for c in message.tool_calls] == ["a", "b", "c"]
    assert [c.id for c in message.tool_calls] == ["call_1", "call_b", "call_2"]
    assert json.loads(message.tool_calls[0].function.arguments) == {"x": 1}
    assert message.tool_calls[2].function.arguments == "{not json"  # sent unchanged
    assert completion.choices[0].finish_reason == "tool_calls"


async def test_429_raises_rate_limit_error_with_retry_after():
    with ScriptedModel([error(429, headers={"retry-after": "1"})]) as m:
        async with client_for(m) as client:
            with pytest.raises(openai.RateLimitError) as info:
                await ask(client)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "1"
    body = info.value.body
    assert isinstance(body, dict) and body["code"] == "rate_limit_exceeded"


async def test_401_raises_authentication_error():
    with ScriptedModel([error(401)]) as m:
        async with client_for(m) as client:
            with pytest.raises(openai.AuthenticationError) as info:
                await ask(client)
    assert info.value.status_code == 401


async def test_500_with_custom_body():
    body = {"error": {"message": "Failed to parse: output does not match the expected format"}}
    with ScriptedModel([error(500, body)]) as m:
        async with client_for(m) as client:
            with pytest.raises(openai.InternalServerError) as info:
                await ask(client)
    assert "does not match the expected format" in info.value.message
    assert m.requests[0].status == 500


async def test_garbage_makes_the_client_raise():
    with ScriptedModel(
        [garbage("<html>bad gateway"), garbage("plain", content_type="text/plain")]
    ) as m:
        async with client_for(m) as client:
            with pytest.raises(ValueError):  # json.JSONDecodeError
                await ask(client)
            # With a non-JSON content type the (non-strict) client hands back the raw text.
            raw = await ask(client)
    assert raw == "plain"
    assert [r.status for r in m.requests] == [200, 200]


async def test_script_exhaustion_and_default():
    with ScriptedModel([text("only one")]) as m:
        async with client_for(m) as client:
            assert (await ask(client)).choices[0].message.content == "only one"
            assert m.remaining == 0
            with pytest.raises(openai.InternalServerError) as info:
                await ask(client)
    assert "exhausted" in info.value.message
    body = info.value.body
    assert isinstance(body, dict) and body["code"] == "script_exhausted"

    with ScriptedModel(["first"], default=text("again")) as m:
        async with client_for(m) as client:
            contents = [(await ask(client)).choices[0].message.content for _ in range(3)]
    assert contents == ["first", "again", "again"]


async def test_extend_appends_to_a_running_script():
    with ScriptedModel() as m:
        m.extend([text("added")])
        assert m.remaining == 1
        async with client_for(m) as client:
            completion = await ask(client)
    assert completion.choices[0].message.content == "added"
