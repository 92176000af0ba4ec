"""Where the cached share of a prompt is read from (activities/model_reply.cached_prompt_count)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from activities.model_reply import cached_prompt_count
from activities.streaming import ReplyAssembler


def test_openai_details_as_object_or_dict():
    u = SimpleNamespace(prompt_tokens_details=SimpleNamespace(cached_tokens=1024))
    assert cached_prompt_count(u, None, 2000) == 1024
    u2 = SimpleNamespace(prompt_tokens_details={"cached_tokens": 7})
    assert cached_prompt_count(u2, None, 2000) == 7


def test_llama_cpp_timings_when_usage_says_nothing():
    u = SimpleNamespace(prompt_tokens_details=None)
    assert cached_prompt_count(u, {"cache_n": 2051, "prompt_n": 753}, 2804) == 2051


def test_never_more_than_the_prompt_and_garbage_is_zero():
    u = SimpleNamespace(prompt_tokens_details={"cached_tokens": 10_000})
    assert cached_prompt_count(u, None, 300) == 300
    assert cached_prompt_count(SimpleNamespace(), {"cache_n": "lots"}, 300) == 0
    assert cached_prompt_count(None, None, 300) == 0
    bad = SimpleNamespace(prompt_tokens_details={"cached_tokens": -5})
    assert cached_prompt_count(bad, None, 300) == 0


def _chunk(**kw: Any) -> Any:
    extra = kw.pop("timings", None)
    return SimpleNamespace(
        model="m",
        usage=kw.get("usage"),
        choices=kw.get("choices", []),
        model_extra={"timings": extra} if extra is not None else {},
    )


def test_a_stream_reads_llama_cpp_timings_from_its_last_chunk():
    """llama.cpp sends the usage chunk, then (or with it) the timings: both are read."""
    delta = SimpleNamespace(content="hi", tool_calls=None)
    choice = SimpleNamespace(index=0, delta=delta, finish_reason="stop")
    asm = ReplyAssembler("m", lambda _t: None)
    asm.add(_chunk(choices=[choice]))
    usage = SimpleNamespace(
        prompt_tokens=900, completion_tokens=2, total_tokens=902, prompt_tokens_details=None
    )
    asm.add(_chunk(usage=usage))
    asm.add(_chunk(timings={"cache_n": 850, "prompt_n": 50}))
    reply = asm.reply([{"role": "user", "content": "x"}])
    assert reply.usage.prompt_tokens == 900
    assert reply.usage.cached_prompt_tokens == 850
