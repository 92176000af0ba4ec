"""Waiting on work inside an activity while telling Temporal the worker is alive.

Used by ``model.complete`` and ``tool.invoke``. A heartbeat is a call to the server that updates
the activity's state in its database, so it costs server work; its only jobs here are to let the
server notice a dead worker within the heartbeat timeout and to carry cancellation back to the
activity (the Python SDK delivers a cancel request in a heartbeat's response). Neither needs a
heartbeat before the work has run for part of the timeout, so the first one waits half of it: a
model call or tool that finishes sooner sends none (measured by ``make bench``, bench/README.md).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity

T = TypeVar("T")

DEFAULT_INTERVAL_SECONDS = 1.0
"""Interval when the activity has no heartbeat timeout (then heartbeats only carry cancellation)."""


def heartbeat_interval(timeout: timedelta | None) -> float:
    """Seconds between heartbeats for a heartbeat ``timeout``: half of it, at least 0.1 s.

    Half leaves a whole interval of margin before the server would time the attempt out. The SDK
    itself throttles heartbeats to 80% of the timeout after the first one (Temporal SDK docs,
    "Activity heartbeats"), so a shorter interval would only send earlier, not more often.
    """
    if timeout is None or timeout <= timedelta(0):
        return DEFAULT_INTERVAL_SECONDS
    return max(0.1, timeout.total_seconds() / 2)


async def await_with_heartbeats(
    work: Awaitable[T], details: Callable[[float], Any] | None = None
) -> T:
    """Await ``work`` in this activity, heartbeating every :func:`heartbeat_interval` seconds.

    Args:
        work: the coroutine or future to wait for (run as a task of its own).
        details: builds the heartbeat details from the milliseconds waited so far; default
            ``{"waiting_ms": ms}``.

    Returns:
        The result of ``work``.

    Raises:
        asyncio.CancelledError: the activity was cancelled; ``work`` is cancelled too.
        Exception: whatever ``work`` raised.
    """
    if activity.info().is_local:  # a local activity has no heartbeats: the workflow task waits
        return await work
    interval = heartbeat_interval(activity.info().heartbeat_timeout)
    started = time.perf_counter()
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            ms = round((time.perf_counter() - started) * 1000)
            activity.heartbeat(details(ms) if details else {"waiting_ms": ms})
    except asyncio.CancelledError:
        task.cancel()
        raise
