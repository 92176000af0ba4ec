"""Streamed replies: chunk assembly, usage fallback, in-stream errors, event clipping."""

from __future__ import annotations

import json
from typing import Any, cast

import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from activities.contracts import ERR_MODEL_OUTPUT_INVALID, ERR_MODEL_UNAVAILABLE
from activities.model import classify_error
from activities.model_reply import MAX_REPORTED_TOKENS, token_count, without_lone_surrogates
from activities.rules import clip
from activities.streaming import ReplyAssembler
from workers.testing.scripted_model import ScriptedModel, text, tool_calls

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "read two files"}]


async def stream_of(model: ScriptedModel, **kw):
    client = model.openai_client()
    # The runtime's plain-dict messages; MESSAGES is one user message, a valid request.
    messages = cast("list[ChatCompletionMessageParam]", MESSAGES)
    stream = await client.chat.completions.create(model="m", messages=messages, stream=True, **kw)
    return [c async for c in stream]


async def test_assembler_joins_text_and_tool_call_deltas_by_index():
    reply = tool_calls(
        [("read_file", {"path": "a.txt"}), ("read_file", {"path": "b/c.txt"})],
        content="Reading both.",
    )
    with ScriptedModel([reply], chunk_chars=2) as m:
        chunks = await stream_of(m, stream_options={"include_usage": True})
    seen: list[str] = []
    asm = ReplyAssembler("m", seen.append)
    for c in chunks:
        asm.add(c)
    out = asm.reply(MESSAGES)
    assert "".join(seen) == out.content == "Reading both." and len(seen) > 3
    assert [(c.name, json.loads(c.arguments)) for c in out.tool_calls] == [
        ("read_file", {"path": "a.txt"}),
        ("read_file", {"path": "b/c.txt"}),
    ]
    assert [c.id for c in out.tool_calls] == ["call_1", "call_2"]
    assert out.finish_reason == "tool_calls" and out.model == "scripted"
    assert chunks[-1].usage is not None
    assert out.usage.total_tokens == chunks[-1].usage.total_tokens > 0


async def test_assembler_estimates_usage_when_the_server_sends_none():
    with ScriptedModel([text("x" * 400)], stream_usage=False) as m:
        chunks = await stream_of(m, stream_options={"include_usage": True})
    asm = ReplyAssembler("m", lambda _t: None)
    for c in chunks:
        asm.add(c)
    out = asm.reply(MESSAGES)
    assert out.content == "x" * 400 and out.tool_calls == []
    assert out.usage.completion_tokens == 100
    assert out.usage.prompt_tokens > 0
    assert out.usage.total_tokens == out.usage.prompt_tokens + 100


def test_assembler_refuses_a_stream_without_choices():
    with pytest.raises(ValueError, match="no choices"):
        ReplyAssembler("m", lambda _t: None).reply(MESSAGES)


def _stream_error(message: str) -> openai.APIError:
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    return openai.APIError(message, request, body={"message": message})


def test_in_stream_errors_are_classified():
    invalid = classify_error(_stream_error("Failed to parse tool call"), attempt=1)
    assert invalid.type == ERR_MODEL_OUTPUT_INVALID and not invalid.non_retryable
    last = classify_error(_stream_error("failed to parse tool call"), attempt=3)
    assert last.type == ERR_MODEL_OUTPUT_INVALID and last.non_retryable
    other = classify_error(_stream_error("slot unavailable"), attempt=1)
    assert other.type == ERR_MODEL_UNAVAILABLE and not other.non_retryable


def test_clip_cuts_long_strings_everywhere():
    long = "y" * 5000
    out = clip({"a": long, "b": [long, 3], "c": "short"}, limit=10)
    assert out["a"] == "y" * 10 + "...[4990 more chars]"
    assert out["b"][0] == out["a"] and out["b"][1] == 3 and out["c"] == "short"


def test_usage_counts_are_bounded_and_lone_surrogates_replaced():
    assert [token_count(v) for v in (2e20, -5, "12", None, "x", 3.9)] == [
        MAX_REPORTED_TOKENS,
        0,
        12,
        0,
        0,
        3,
    ]
    assert json.loads(without_lone_surrogates('{"a": "\\ud800x"}')) == {"a": "\ufffdx"}
    assert json.loads(without_lone_surrogates('{"a": "\ud800"}')) == {"a": "\ufffd"}
    pair = '{"e": "\\ud83d\\ude00"}'  # a whole pair (an emoji) is left as it is
    assert without_lone_surrogates(pair) == pair
    assert without_lone_surrogates("not json \\u") == "not json \\u"
