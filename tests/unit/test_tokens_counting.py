"""Unit tests of activities/tokens.py, the counts: chat overhead, tools and calls, the activity,
and the workflow's upper bound (workflows.compaction.token_upper_bound)."""

from __future__ import annotations

import json
import random

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities import tokens
from activities.contracts import CountTokensInput, TokenCounts
from activities.tokens import (
    APPROX_ENCODING,
    CL100K_BASE,
    REPLY_PRIMING_TOKENS,
    count_message,
    count_messages,
    encoding_for,
    tokens_count,
)
from workflows.compaction import token_upper_bound

READ_FILE_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file from the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "description": "workspace-relative path"}},
            "required": ["path"],
        },
    },
}


# --- message accounting (any encoding) ------------------------------------------------------


@pytest.fixture(params=[None, APPROX_ENCODING], ids=["model-encoding", "approx"])
def encoding(request: pytest.FixtureRequest) -> str | None:
    return request.param


def test_counts_positive_and_deterministic(encoding: str | None) -> None:
    msgs = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None},
        {"role": "user", "content": ""},
    ]
    a = count_messages(msgs, [READ_FILE_TOOL], "gpt-4o", encoding)
    b = count_messages(msgs, [READ_FILE_TOOL], "gpt-4o", encoding)
    assert a == b
    assert all(n >= 3 for n in a.per_message)
    assert a.total == sum(a.per_message) + a.tools + REPLY_PRIMING_TOKENS


def test_long_message_counts_more(encoding: str | None) -> None:
    short = {"role": "user", "content": "Summarise the README."}
    long = {"role": "user", "content": "Summarise the README. " * 50}
    counts = count_messages([short, long], [], "gpt-4o-mini", encoding)
    assert counts.per_message[1] > counts.per_message[0] * 10


def test_tool_schemas_counted(encoding: str | None) -> None:
    msgs = [{"role": "user", "content": "list files"}]
    bare = count_messages(msgs, [], "gpt-4.1", encoding)
    one = count_messages(msgs, [READ_FILE_TOOL], "gpt-4.1", encoding)
    bigger = json.loads(json.dumps(READ_FILE_TOOL))
    bigger["function"]["description"] += " Returns at most 16000 characters; binary files fail."
    two = count_messages(msgs, [READ_FILE_TOOL, bigger], "gpt-4.1", encoding)
    assert bare.tools == 0
    assert one.tools > 20
    assert two.tools > 2 * one.tools
    assert one.total - bare.total == one.tools
    assert one.per_message == bare.per_message


def test_tool_calls_counted(encoding: str | None) -> None:
    def call(args: str) -> dict:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": args},
                }
            ],
        }

    plain = {"role": "assistant", "content": None}
    short, long, broken = call('{"path": "a"}'), call(json.dumps({"path": "x/" * 100})), call("{")
    counts = count_messages([plain, short, long, broken], [], "gpt-4o", encoding)
    assert counts.per_message[1] > counts.per_message[0] + 2
    assert counts.per_message[2] > counts.per_message[1] + 20
    assert counts.per_message[3] > counts.per_message[0]


def test_name_and_tool_call_id_counted(encoding: str | None) -> None:
    base = {"role": "tool", "content": "ok"}
    counts = count_messages(
        [base, {**base, "tool_call_id": "call_abc"}, {**base, "name": "read_file"}],
        [],
        "gpt-4o",
        encoding,
    )
    _, enc = encoding_for("gpt-4o", encoding)
    assert counts.per_message[1] == counts.per_message[0] + enc.count("call_abc")
    assert counts.per_message[2] == counts.per_message[0] + enc.count("read_file") + 1


def test_content_parts(encoding: str | None) -> None:
    text = "describe this picture in detail please"
    as_str = {"role": "user", "content": text}
    as_parts = {"role": "user", "content": [{"type": "text", "text": text}]}
    with_image = {
        "role": "user",
        "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
    }
    counts = count_messages([as_str, as_parts, with_image], [], "gpt-4o", encoding)
    assert counts.per_message[0] == counts.per_message[1]
    assert counts.per_message[2] == counts.per_message[1] + tokens.IMAGE_PART_TOKENS


def test_non_mapping_message_raises() -> None:
    with pytest.raises(TypeError, match="mapping"):
        count_messages(["hello"], [], "gpt-4o")  # pyright: ignore[reportArgumentType] - a str message on purpose: the TypeError is the point


# --- the activity ---------------------------------------------------------------------------


async def test_activity_called_directly() -> None:
    req = CountTokensInput(
        model="qwen2.5-coder-1.5b-instruct",
        messages=[{"role": "user", "content": "hello there"}],
        tools=[READ_FILE_TOOL],
    )
    out = await tokens_count(req)
    assert isinstance(out, TokenCounts)
    assert out == count_messages(req.messages, req.tools, req.model)
    assert out.encoding in (CL100K_BASE, APPROX_ENCODING)
    assert out.tools > 0 and out.per_message[0] > 3


async def test_activity_in_activity_environment() -> None:
    req = CountTokensInput(
        model="gpt-4o", encoding=APPROX_ENCODING, messages=[{"role": "user", "content": "abcd"}]
    )
    out = await ActivityEnvironment().run(tokens_count, req)
    assert out == TokenCounts(
        per_message=[3 + 1 + 1], tools=0, total=5 + 3, encoding="approx-chars/4"
    )


async def test_activity_unknown_encoding_is_non_retryable() -> None:
    req = CountTokensInput(model="gpt-4o", encoding="nope", messages=[])
    with pytest.raises(ApplicationError) as info:
        await tokens_count(req)
    assert info.value.non_retryable
    assert info.value.type == tokens.ERR_TOKEN_ENCODING_UNKNOWN


def test_activity_name() -> None:
    from temporalio.activity import _Definition

    defn = _Definition.from_callable(tokens_count)
    assert defn is not None and defn.name == "tokens.count"


# --- the workflow's upper bound (workflows.compaction.token_upper_bound) ----------------------


def _bound_cases() -> list[dict]:
    rng = random.Random(7)
    words = ["read", "файл", "数据", "🙂", "x" * 40, '"quoted"', "\\back", "\n", "{}", "0.5"]
    cases: list[dict] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": None},
        {"role": "tool", "tool_call_id": "call_1", "content": "0123456789" * 500},
        {"role": "user", "name": "alice", "content": "hi"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:x"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}},
                {"id": "d", "type": "function", "function": {"name": "g", "arguments": "not json"}},
            ],
        },
    ]
    for _ in range(200):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 60)))
        args = json.dumps({"path": text, "n": rng.randint(0, 9)}, separators=(",", ":"))
        cases.append(
            rng.choice(
                [
                    {"role": "user", "content": text},
                    {"role": "tool", "tool_call_id": "c1", "content": text},
                    {
                        "role": "assistant",
                        "content": text or None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "read", "arguments": args},
                            }
                        ],
                    },
                ]
            )
        )
    return cases


def test_workflow_token_bound_is_never_below_the_count(encoding: str | None) -> None:
    _, enc = encoding_for("gpt-4o", encoding)
    counts = [count_message(msg, enc) for msg in _bound_cases()]
    assert sum(counts) > 5000  # real counts, not zeros
    for msg, n in zip(_bound_cases(), counts, strict=True):
        assert n <= token_upper_bound(msg), msg


# --- the tool schemas counted when a spec is pinned --------------------------------------------


async def test_tools_are_counted_at_pin_only_when_their_bound_is_over_half_the_budget() -> None:
    tools = [READ_FILE_TOOL] * 5
    bound = sum(token_upper_bound(t) for t in tools)
    counted = await tokens.tools_tokens_at_pin(tools, "gpt-4o", None, 2 * bound - 1)
    assert counted == count_messages([], tools, "gpt-4o").tools  # as tokens.count counts them
    assert counted is not None and counted < bound
    assert await tokens.tools_tokens_at_pin(tools, "gpt-4o", None, 2 * bound) is None
    assert await tokens.tools_tokens_at_pin(tools, "gpt-4o", "no-such-encoding", 1) is None
