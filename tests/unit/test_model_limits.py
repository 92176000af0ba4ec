"""One ``model.complete`` attempt against servers nobody here wrote (activities/model_limits.py).

Each test runs the real activity in Temporal's ``ActivityEnvironment`` against a real HTTP server
(tests/support/hostile_model.py) that trickles, stalls, streams forever, sends a body of 200 MB,
or a reply of 10,000 tool calls. Before the limits, the first four hung the attempt until its
start-to-close timeout (or forever), or were read whole and taken as the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx2
import openai
import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.contracts import ERR_MODEL_OUTPUT_INVALID, ERR_MODEL_UNAVAILABLE, CallModelInput
from activities.http_cap import ReplyTooLarge
from activities.model import ModelActivities, classify_error
from activities.model_limits import attempt_seconds
from activities.model_reply import MAX_TOOL_CALLS
from tests.support import hostile_model as hm

GUARD = 30.0
"""Seconds after which a test gives up on an attempt that should have ended (a hang guard)."""


def _environment(start_to_close: float = 60.0) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        workflow_id="",  # no run to publish to
        heartbeat_timeout=timedelta(seconds=5),
        start_to_close_timeout=timedelta(seconds=start_to_close),
        schedule_to_close_timeout=None,
    )
    return env


async def _attempt(
    behaviour: hm.Behaviour, streamed: bool, start_to_close: float = 60.0, **limits: Any
) -> Any:
    """The activity's reply to ``behaviour``, or the ``ApplicationError`` it raised."""
    with hm.HostileModel([behaviour]) as model:
        acts = ModelActivities(model.base_url, "k", **limits)
        messages = [{"role": "user", "content": "hi"}]
        req = CallModelInput(run_id="r", turn=1, model="m", messages=messages, stream=streamed)
        env = _environment(start_to_close)
        try:
            return await asyncio.wait_for(env.run(acts.model_complete, req), GUARD)
        except ApplicationError as err:
            return err


async def test_an_endless_stream_ends_at_the_reply_cap():
    err = await _attempt(hm.endless(), True, max_reply_bytes=256 * 1024)
    assert isinstance(err, ApplicationError)
    assert err.type == ERR_MODEL_UNAVAILABLE and not err.non_retryable
    assert "too large" in err.message and "262144 bytes" in err.message
    assert "AGENT_MODEL_MAX_REPLY_BYTES" in err.message


@pytest.mark.parametrize("field", ["content", "arguments"])
async def test_a_huge_plain_body_is_not_read_past_the_cap(field: str):
    err = await _attempt(hm.huge(200, field), False, max_reply_bytes=1024 * 1024)
    assert isinstance(err, ApplicationError)
    assert err.type == ERR_MODEL_UNAVAILABLE and not err.non_retryable
    assert "went past 1048576 bytes" in err.message


@pytest.mark.parametrize("behaviour", [hm.stall(), hm.trickle(0.1)], ids=["stall", "trickle"])
async def test_a_stream_that_stops_sending_chunks_fails_as_stalled(behaviour: hm.Behaviour):
    err = await _attempt(behaviour, True, idle_seconds=0.5)
    assert isinstance(err, ApplicationError)
    assert err.type == ERR_MODEL_UNAVAILABLE and not err.non_retryable
    assert "stalled" in err.message and "no chunk for 0.5 s" in err.message


@pytest.mark.parametrize("behaviour", [hm.stall(), hm.trickle(0.1)], ids=["stall", "trickle"])
async def test_a_plain_reply_that_never_ends_fails_within_the_attempt(behaviour: hm.Behaviour):
    err = await _attempt(behaviour, False, start_to_close=2.0)
    assert isinstance(err, ApplicationError)
    assert err.type == ERR_MODEL_UNAVAILABLE and not err.non_retryable
    assert "did not finish its reply within 1.8 s" in err.message


async def test_a_reply_with_too_many_tool_calls_is_unusable_output():
    err = await _attempt(hm.many_calls(10_000), False)
    assert isinstance(err, ApplicationError)
    assert err.type == ERR_MODEL_OUTPUT_INVALID and not err.non_retryable
    assert f"10000 tool calls; one step may make at most {MAX_TOOL_CALLS}" in err.message
    reply = await _attempt(hm.many_calls(MAX_TOOL_CALLS), False)
    assert not isinstance(reply, ApplicationError)
    assert len(reply.tool_calls) == MAX_TOOL_CALLS


BAD_UTF8 = b'{"choices": [{"index": 0, "message": {"content": "caf\xe9 \xff"}}]}'


@pytest.mark.parametrize(
    ("streamed", "body"),
    [
        (False, BAD_UTF8),
        (True, b"data: " + BAD_UTF8 + b"\n\ndata: [DONE]\n\n"),
        (True, hm.chunk({"role": "assistant"}) + b'data: {"choices": [nope\n\n'),
    ],
    ids=["plain-not-utf8", "stream-not-utf8", "stream-not-json"],
)
async def test_bytes_that_are_not_utf8_or_json_are_named_unreadable_output(
    streamed: bool, body: bytes
):
    err = await _attempt(hm.raw(body, body), streamed)
    assert isinstance(err, ApplicationError)
    assert err.type == ERR_MODEL_OUTPUT_INVALID and not err.non_retryable
    assert "could not be read" in err.message


def test_a_cap_the_sdk_wrapped_is_still_named():
    request = httpx2.Request("POST", "http://x/v1/chat/completions")
    try:
        try:
            raise ReplyTooLarge("past 10 bytes")
        except ReplyTooLarge as inner:
            raise openai.APIConnectionError(request=request) from inner
    except openai.APIConnectionError as wrapped:
        err = classify_error(wrapped)
    assert (
        err.type == ERR_MODEL_UNAVAILABLE and err.message == "model reply too large: past 10 bytes"
    )


def test_the_attempt_deadline_leaves_the_runs_deadline_to_temporal():
    info = _environment(120.0).info
    assert attempt_seconds(info) == 115.0
    assert attempt_seconds(dataclasses.replace(info, start_to_close_timeout=None)) is None
    short = dataclasses.replace(info, start_to_close_timeout=timedelta(seconds=4))
    assert attempt_seconds(short) == pytest.approx(3.6)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    run_ends = dataclasses.replace(
        info, scheduled_time=now, schedule_to_close_timeout=timedelta(seconds=100)
    )
    # 100 s left of the run: its schedule-to-close comes first and must reach the workflow
    assert attempt_seconds(run_ends, now=now.timestamp()) is None
    # 1,000 s left: the attempt's own deadline
    far = dataclasses.replace(run_ends, schedule_to_close_timeout=timedelta(seconds=1000))
    assert attempt_seconds(far, now=now.timestamp()) == 115.0
