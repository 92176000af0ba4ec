"""``GET /runs/{run_id}/events``: a run's events as Server-Sent Events.

``id`` is the item's offset (``OFFSET.CHARS`` on a live text delta: the step's characters given
so far), ``data`` its JSON; ``Last-Event-ID`` or ``?from=N`` resumes (after ``OFFSET.CHARS``, the
step's text is not given twice); an ``end`` event follows ``run_finished``; a comment line keeps
an idle connection open every :data:`KEEPALIVE_SECONDS`. :mod:`workers.console.serve` re-exports
:data:`KEEPALIVE_SECONDS`. The events are read by :func:`workers.live_reader.run_events` (the
workers' live channels, docs/live-runs.md); :func:`event_stream` is that reading as SSE lines,
for any HTTP front end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator
from typing import Any

from aiohttp import web
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError

from workers import client as rc
from workers.console.common import CLIENT_KEY, LIVE_SECRET_KEY, NO_FRAMING_HEADERS, _own_run
from workers.http_site import open_sse
from workers.live_reader import run_events

__all__ = ["KEEPALIVE_SECONDS", "MAX_OFFSET_DIGITS", "event_stream"]

KEEPALIVE_SECONDS = 15.0
"""Idle time after which the event stream sends a comment line."""


MAX_OFFSET_DIGITS = 18
"""Longest offset accepted in ``?from=`` or ``Last-Event-ID`` (ASCII digits; fits an int64)."""


def _offset(raw: str, name: str) -> int:
    """``raw`` as an offset: 1 to :data:`MAX_OFFSET_DIGITS` ASCII digits, else a 400 naming ``name``."""
    raw = raw.strip()
    if not (0 < len(raw) <= MAX_OFFSET_DIGITS and raw.isascii() and raw.isdigit()):
        raise web.HTTPBadRequest(
            text=json.dumps(
                {
                    "error": f"{name} must be a non-negative integer "
                    f"(at most {MAX_OFFSET_DIGITS} digits 0-9)"
                }
            ),
            content_type="application/json",
        )
    return int(raw)


def _from_offset(request: web.Request) -> tuple[int, int]:
    """Where the stream starts, and how much of the current step's text was given.

    The offset after ``Last-Event-ID``, else ``?from=``, else 0; the characters: the ``.CHARS``
    of a live delta's id (else 0).

    Raises:
        web.HTTPBadRequest: either is not an offset (:func:`_offset`).
    """
    last = request.headers.get("Last-Event-ID", "").strip()
    if last:
        off, dot, chars = last.partition(".")
        skip = _offset(chars, "Last-Event-ID") if dot else 0
        return _offset(off, "Last-Event-ID") + 1, skip
    return _offset(request.query.get("from", "0"), "from"), 0


def _event_id(ev: dict[str, Any]) -> str:
    """The SSE id of ``ev``: its offset, with ``.chars`` on a live text delta."""
    if ev.get("live") and ev.get("chars") is not None:
        return f"{ev['offset']}.{ev['chars']}"
    return str(ev["offset"])


async def event_stream(
    client: Client,
    run_id: str,
    from_offset: int,
    skip_chars: int,
    live_secret: bytes | None,
    quiet_seconds: float = KEEPALIVE_SECONDS,
) -> AsyncGenerator[dict[str, Any] | None, None]:
    """The run's events (:func:`workers.live_reader.run_events`); None after each silence.

    None comes every ``quiet_seconds`` (default :data:`KEEPALIVE_SECONDS`) without an event: send
    a keepalive then (the console), or check what the run waits for (AG-UI).

    Raises:
        RPCError, WorkflowUpdateFailedError: as :func:`workers.live_reader.run_events`.
    """
    events = run_events(
        client, run_id, from_offset, secret=live_secret or None, skip_chars=skip_chars
    )
    nxt: asyncio.Future[dict[str, Any]] | None = None
    try:
        while True:
            nxt = nxt or asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({nxt}, timeout=quiet_seconds)
            if not done:
                yield None
                continue
            try:
                ev = nxt.result()
            except StopAsyncIteration:
                return
            nxt = None
            yield ev
    finally:
        if nxt is not None and not nxt.done():
            nxt.cancel()
            with contextlib.suppress(BaseException):
                await nxt
        await events.aclose()


async def _events(request: web.Request) -> web.StreamResponse:
    client = request.app[CLIENT_KEY]
    run_id = await _own_run(request)
    start, skip = _from_offset(request)
    await rc.handle(client, run_id).describe()  # 404 as JSON before the stream starts
    resp = await open_sse(request, NO_FRAMING_HEADERS)
    events = event_stream(client, run_id, start, skip, request.app[LIVE_SECRET_KEY])
    try:
        async for ev in events:
            if ev is None:
                await resp.write(b": keepalive\n\n")
                continue
            await resp.write(f"id: {_event_id(ev)}\ndata: {json.dumps(ev)}\n\n".encode())
        await resp.write(b"event: end\ndata: {}\n\n")
    except (RPCError, WorkflowUpdateFailedError) as e:
        msg = e.message if isinstance(e, RPCError) else str(e.cause or e)
        await resp.write(f"event: error\ndata: {json.dumps({'error': msg})}\n\n".encode())
    except ConnectionResetError:
        pass  # the subscriber went away
    finally:
        await events.aclose()
    return resp
