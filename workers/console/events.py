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

__all__ = ["KEEPALIVE_SECONDS"]

KEEPALIVE_SECONDS = 15.0
"""Idle time after which the event stream sends a comment line."""


def _from_offset(request: web.Request) -> int:
    """Where the stream starts: after ``Last-Event-ID``, else ``?from=``, else 0."""
    last = request.headers.get("Last-Event-ID")
    raw = str(int(last) + 1) if last and last.strip().isdigit() else request.query.get("from", "0")
    if not raw.isdigit():
        raise web.HTTPBadRequest(
            text=json.dumps({"error": "from must be a non-negative integer"}),
            content_type="application/json",
        )
    return int(raw)


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
