"""activities.heartbeat: when an activity waiting on work heartbeats."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import timedelta

import pytest
from temporalio import activity
from temporalio.testing import ActivityEnvironment

from activities.heartbeat import DEFAULT_INTERVAL_SECONDS, await_with_heartbeats, heartbeat_interval


def test_interval_is_half_the_heartbeat_timeout():
    assert heartbeat_interval(timedelta(seconds=5)) == 2.5
    assert heartbeat_interval(timedelta(milliseconds=100)) == 0.1  # floor
    assert heartbeat_interval(None) == DEFAULT_INTERVAL_SECONDS
    assert heartbeat_interval(timedelta(0)) == DEFAULT_INTERVAL_SECONDS


def _env(
    heartbeat_timeout: timedelta | None,
) -> tuple[ActivityEnvironment, list[tuple[float, object]]]:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=heartbeat_timeout)
    beats: list[tuple[float, object]] = []
    env.on_heartbeat = lambda *details: beats.append((time.monotonic(), details[0]))
    return env, beats


@activity.defn
async def _wait(seconds: float) -> str:
    async def work() -> str:
        await asyncio.sleep(seconds)
        return "done"

    return await await_with_heartbeats(work())


async def test_work_shorter_than_half_the_timeout_sends_no_heartbeat():
    env, beats = _env(timedelta(seconds=1))
    assert await env.run(_wait, 0.3) == "done"
    assert beats == []


async def test_longer_work_heartbeats_every_half_timeout_with_the_time_waited():
    env, beats = _env(timedelta(milliseconds=400))
    started = time.monotonic()
    assert await env.run(_wait, 0.9) == "done"
    assert 3 <= len(beats) <= 5  # at about 0.2, 0.4, 0.6, 0.8 s
    first_at, first = beats[0]
    assert 0.15 <= first_at - started < 0.4
    assert isinstance(first, dict) and 150 <= first["waiting_ms"] < 400


async def test_cancelling_the_activity_cancels_the_work():
    env, _ = _env(timedelta(milliseconds=200))
    cancelled = asyncio.Event()

    @activity.defn
    async def waits_forever() -> None:
        async def work() -> None:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        await await_with_heartbeats(work(), lambda ms: {"running_ms": ms})

    task = asyncio.ensure_future(env.run(waits_forever))
    await asyncio.sleep(0.3)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled.is_set()
