"""``GET /runs/{run_id}/events``: a run's events as Server-Sent Events.

``id`` is the item's offset, ``data`` its JSON; ``Last-Event-ID`` or ``?from=N`` resumes; an
``end`` event follows ``run_finished``; a comment line keeps an idle connection open every
:data:`KEEPALIVE_SECONDS`. :mod:`workers.console.serve` re-exports :data:`KEEPALIVE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from aiohttp import web
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from workers import client as rc
from workers.console.common import CLIENT_KEY, NO_FRAMING_HEADERS, _own_run

__all__ = ["KEEPALIVE_SECONDS", "MAX_OFFSET_DIGITS"]

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


def _from_offset(request: web.Request) -> int:
    """Where the stream starts: after ``Last-Event-ID``, else ``?from=``, else 0.

    Raises:
        web.HTTPBadRequest: either is not an offset (:func:`_offset`).
    """
    last = request.headers.get("Last-Event-ID", "").strip()
    if last:
        return _offset(last, "Last-Event-ID") + 1
    return _offset(request.query.get("from", "0"), "from")


async def _events(request: web.Request) -> web.StreamResponse:
    client = request.app[CLIENT_KEY]
    run_id = await _own_run(request)
    start = _from_offset(request)
    await rc.handle(client, run_id).describe()  # 404 as JSON before the stream starts
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            **NO_FRAMING_HEADERS,
        }
    )
    await resp.prepare(request)
    events = rc.follow(client, run_id, start)
    nxt: asyncio.Future[dict[str, Any]] | None = None
    try:
        while True:
            nxt = nxt or asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({nxt}, timeout=KEEPALIVE_SECONDS)
            if not done:
                await resp.write(b": keepalive\n\n")
                continue
            try:
                ev = nxt.result()
            except StopAsyncIteration:
                break
            nxt = None
            await resp.write(f"id: {ev['offset']}\ndata: {json.dumps(ev)}\n\n".encode())
        await resp.write(b"event: end\ndata: {}\n\n")
    except (RPCError, WorkflowUpdateFailedError) as e:
        msg = e.message if isinstance(e, RPCError) else str(e.cause or e)
        await resp.write(f"event: error\ndata: {json.dumps({'error': msg})}\n\n".encode())
    except ConnectionResetError:
        pass  # the subscriber went away
    finally:
        if nxt is not None and not nxt.done():
            nxt.cancel()
            with contextlib.suppress(BaseException):
                await nxt
        await events.aclose()
    return resp
