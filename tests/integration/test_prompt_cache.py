"""Prompt caching (issue #40 part 3): the transcript's beginning stays byte-stable from one model
step to the next, the endpoint's cached prompt tokens reach the run's usage, and ``pricing`` prices
them apart.

Real dev server; the scripted model plays an endpoint with a prefix cache (``prompt_cache=True``:
OpenAI's ``usage.prompt_tokens_details.cached_tokens``, counted over the longest leading run of
messages an earlier request began with), so a step that rewrote anything earlier in the transcript
would be cached less, and the check on the request log below would fail first.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from temporalio.client import Client

from activities.contracts import Usage
from tests.support.harness import Harness, until_state
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, text, tool_call

PRICES = {"prompt_per_mtok": 1000.0, "completion_per_mtok": 2000.0, "cached_prompt_per_mtok": 100.0}
CALC = tool_call("calculator", {"expression": "6*7"})
WRITE = tool_call("write_file", {"path": "notes/cache.md", "content": "cached"})


def _as_json(messages: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(m, sort_keys=True) for m in messages]


async def test_each_step_resends_the_earlier_transcript_unchanged_and_its_cache_is_priced(
    client: Client, tmp_path: Path
):
    """Three steps: a local tool held for the next step, an approved write, the answer."""
    model = ScriptedModel([CALC, WRITE, text("done: 42")], prompt_cache=True)
    agents = {"default": {"pricing": PRICES}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        handle = await h.start("multiply, then write a note")
        st = await until_state(handle, lambda s: s.status == "awaiting_approval", timeout=30)
        call = st.pending_approvals[0].tool_call_id
        await rc.decide(client, handle.id, call, "approve", "alice")
        res = await asyncio.wait_for(handle.result(), timeout=60)
    assert res.status == "completed", res.stopped_reason
    assert [c.status for c in res.tool_calls] == ["ok", "ok"]

    sent = [_as_json(r.messages) for r in model.requests]
    assert len(sent) == 3
    for earlier, later in zip(sent, sent[1:], strict=False):
        assert later[: len(earlier)] == earlier, "a later step rewrote the transcript's beginning"
        assert len(later) > len(earlier)

    # the endpoint's cached counts, summed by the run; the cost priced cached tokens apart
    assert res.usage.cached_prompt_tokens > 0
    assert res.usage.cached_prompt_tokens < res.usage.prompt_tokens
    u = res.usage
    expected = (
        (u.prompt_tokens - u.cached_prompt_tokens) * 1000.0
        + u.cached_prompt_tokens * 100.0
        + u.completion_tokens * 2000.0
    ) / 1e6
    assert abs(u.cost_usd - expected) < 1e-6
    # without the cached price it would have cost more
    assert u.cost_usd < (u.prompt_tokens * 1000.0 + u.completion_tokens * 2000.0) / 1e6


async def test_an_endpoint_that_reports_no_cache_leaves_the_count_at_zero(
    client: Client, tmp_path: Path
):
    """No ``prompt_tokens_details`` and no ``timings``: nothing is counted as cached."""
    model = ScriptedModel([CALC, text("42")])
    agents = {"default": {"pricing": PRICES}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        res = await asyncio.wait_for((await h.start("multiply")).result(), timeout=60)
    assert res.status == "completed", res.stopped_reason
    assert res.usage.cached_prompt_tokens == 0
    u = res.usage
    full = (u.prompt_tokens * 1000.0 + u.completion_tokens * 2000.0) / 1e6
    assert abs(u.cost_usd - full) < 1e-6


def test_usage_sums_cached_tokens():
    a = Usage(prompt_tokens=10, cached_prompt_tokens=4, total_tokens=10)
    b = Usage(prompt_tokens=20, cached_prompt_tokens=15, total_tokens=20)
    assert a.add(b).cached_prompt_tokens == 19
