"""What a model server may cost one attempt: bytes, silence between chunks, wall time.

A model server is not trusted to end its reply. Measured against a real HTTP server
(``tests/integration/test_model_limits.py``): a 200 MB body was read whole and taken as the
answer (730 MB of worker memory); a stream that never ends grew the worker without bound; a
stream that stalls, or trickles a byte at a time, kept the attempt alive (its heartbeats go on)
until the activity's start-to-close timeout, which then named nothing. Here:

* :func:`http_client`: the ``openai`` client's HTTP client, whose response bodies stop at
  ``max_reply_bytes`` bytes as received (a plain JSON body, or a whole event stream):
  :class:`activities.http_cap.ReplyTooLarge`.
* :func:`until_idle`: the chunks of a streamed reply, ended by :class:`ReplyStalled` when none
  comes for ``idle_seconds`` after the first (the wait for the first is the prompt's processing).
* :func:`attempt_seconds`: the wall time the activity gives the HTTP exchange, a little under its
  start-to-close timeout, so the attempt fails with :class:`ReplyStalled` naming what was
  received instead of timing out unnamed.

Each is classified ``ModelUnavailable``, retryable (``activities.model_errors.classify_error``):
Temporal retries the step, then the spec's fallback models are tried.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator
from datetime import timedelta
from typing import TypeVar

import httpx2
import openai
from temporalio import activity

from activities.http_cap import cap_response_hook

T = TypeVar("T")

DEFAULT_MAX_REPLY_BYTES = 32 * 1024 * 1024
"""Bytes of one response body at most (32 MiB). A streamed reply costs about 50 times its text
on the wire (each token is a ``chat.completion.chunk`` of some 200 bytes), so this allows some
150,000 streamed tokens, or a plain JSON reply of 32 MiB."""
DEFAULT_IDLE_SECONDS = 60.0
"""Seconds a stream may go without a chunk, after its first (60). A server that sends a tool
call whole once generated (Ollama does) is silent while it generates it."""
DEADLINE_MARGIN_SECONDS = 5.0
"""The HTTP exchange ends this much (or a tenth of the timeout, when less) before the attempt's
start-to-close timeout, so its failure reaches the server first."""


class ReplyStalled(Exception):
    """The reply stopped coming: no chunk within the idle timeout, or no end within the attempt."""


def http_client(max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES) -> httpx2.AsyncClient:
    """The ``openai`` SDK's default HTTP client, its response bodies capped at ``max_reply_bytes``.

    The cap is a response hook, so it holds through any transport (proxies from the environment
    included). Reading past it raises :class:`activities.http_cap.ReplyTooLarge` from the read (the SDK passes it on)
    and the connection is closed.
    """
    cap = cap_response_hook(
        max_reply_bytes, "the model server's reply (AGENT_MODEL_MAX_REPLY_BYTES)"
    )
    return openai.DefaultAsyncHttpxClient(event_hooks={"response": [cap]})


async def until_idle(chunks: AsyncIterable[T], idle_seconds: float) -> AsyncIterator[T]:
    """``chunks`` as they come, raising :class:`ReplyStalled` when one takes ``idle_seconds``.

    The first chunk may take as long as the attempt allows; ``idle_seconds`` <= 0: no limit.
    """
    it = aiter(chunks)
    first = True
    while True:
        wait = asyncio.timeout(None if first or idle_seconds <= 0 else idle_seconds)
        try:
            async with wait:
                item = await anext(it)
        except StopAsyncIteration:
            return
        except TimeoutError:
            if not wait.expired():
                raise
            raise ReplyStalled(
                f"the model server sent no chunk for {idle_seconds:g} s "
                "(AGENT_MODEL_IDLE_TIMEOUT): the stream stalled"
            ) from None
        first = False
        yield item


def attempt_seconds(info: activity.Info, now: float | None = None) -> float | None:
    """Seconds this attempt gives the model's HTTP exchange; None: no limit of its own.

    The attempt's start-to-close timeout less :data:`DEADLINE_MARGIN_SECONDS` (or a tenth of it).
    None when there is no such timeout, or when the activity's schedule-to-close (the run's
    deadline, ``workflows/run_context.py``) may come first: that timeout must reach the workflow
    as itself. ``now``: the Unix time (default: the clock's).
    """
    timeout = info.start_to_close_timeout
    if timeout is None or timeout <= timedelta(0):
        return None
    total = timeout.total_seconds()
    seconds = total - min(DEADLINE_MARGIN_SECONDS, total / 10)
    close = info.schedule_to_close_timeout
    if close is not None and close > timedelta(0):
        left = (info.scheduled_time + close).timestamp() - (time.time() if now is None else now)
        if left <= total:
            return None
    return seconds
