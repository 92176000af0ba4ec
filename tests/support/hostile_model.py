"""A model server nobody here wrote: the scripted model, taught to misbehave over real HTTP.

:class:`HostileModel` is a :class:`~workers.testing.scripted_model.ScriptedModel` (same lifecycle,
same request log) that answers its first requests with hostile behaviours, one per request, in
order, then from its script. A behaviour is an async function ``(request, stream) -> response``
writing to a real aiohttp ``StreamResponse``; the ones below play what real servers and proxies
were seen to do: trickle bytes, stall with the connection open, stream forever, send a huge body,
send bytes that are not UTF-8 or chunks that are not JSON. Each stops when the client goes away.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from aiohttp import web

from workers.testing.scripted_model import RecordedRequest, Reply, ScriptedModel

Behaviour = Callable[[web.Request, bool], Awaitable[web.StreamResponse]]
"""Answers one request: ``(request, streamed) -> response`` (``streamed``: the body asked
``stream: true``)."""

_BASE = {"id": "chatcmpl-hostile", "created": 0, "model": "hostile"}


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    """One SSE ``data:`` event carrying a ``chat.completion.chunk`` with ``delta``."""
    body = {
        **_BASE,
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(body)}\n\n".encode()


def completion(message: dict[str, Any]) -> dict[str, Any]:
    """A whole ``chat.completion`` object answering with ``message`` (finish ``stop``)."""
    return {
        **_BASE,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


async def _open(request: web.Request, streamed: bool) -> web.StreamResponse:
    kind = "text/event-stream" if streamed else "application/json"
    resp = web.StreamResponse(status=200, headers={"Content-Type": kind})
    await resp.prepare(request)
    return resp


def trickle(every: float = 0.5) -> Behaviour:
    """Headers, then one byte of a never-ending body every ``every`` seconds (a slow proxy).

    No read ever waits longer than ``every``, so a per-read timeout never fires.
    """

    async def answer(request: web.Request, streamed: bool) -> web.StreamResponse:
        resp = await _open(request, streamed)
        if streamed:
            await resp.write(chunk({"role": "assistant", "content": ""}) + b"data: {")
        else:
            await resp.write(b'{"choices": [')
        while True:
            await asyncio.sleep(every)
            await resp.write(b" ")

    return answer


def stall(text: str = "The answer is") -> Behaviour:
    """A few chunks of ``text`` (streamed) or half a body (plain), then nothing, connection open."""

    async def answer(request: web.Request, streamed: bool) -> web.StreamResponse:
        resp = await _open(request, streamed)
        if streamed:
            await resp.write(chunk({"role": "assistant", "content": ""}))
            for word in text.split():
                await resp.write(chunk({"content": word + " "}))
        else:
            whole = json.dumps(completion({"role": "assistant", "content": text}))
            await resp.write(whole[: len(whole) // 2].encode())
        while request.transport is not None and not request.transport.is_closing():
            await asyncio.sleep(0.05)  # until the client goes away
        return resp

    return answer


def endless(piece: str = "la " * 200) -> Behaviour:
    """Valid content chunks of ``piece`` as fast as the client reads, never a ``finish_reason``."""

    async def answer(request: web.Request, streamed: bool) -> web.StreamResponse:
        resp = await _open(request, True)
        event = chunk({"content": piece})
        await resp.write(chunk({"role": "assistant", "content": ""}))
        while True:
            await resp.write(event * 16)

    return answer


def huge(megabytes: int = 200, field: str = "content") -> Behaviour:
    """A plain 200 whose JSON is ``megabytes`` MiB: the text (``field="content"``) or one tool
    call's ``arguments`` (``field="arguments"``) is that long. Written as it goes."""

    async def answer(request: web.Request, streamed: bool) -> web.StreamResponse:
        resp = await _open(request, False)
        marker = "\x00HUGE\x00"
        message: dict[str, Any] = {"role": "assistant", "content": marker}
        if field != "content":
            function = {"name": "record", "arguments": marker}
            call = {"id": "c1", "type": "function", "function": function}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
        head, tail = json.dumps(completion(message)).split(json.dumps(marker)[1:-1])
        await resp.write(head.encode())
        block = b"a" * (1024 * 1024)
        for _ in range(megabytes):
            await resp.write(block)
        await resp.write(tail.encode())
        await resp.write_eof()
        return resp

    return answer


def many_calls(count: int = 10_000) -> Behaviour:
    """A plain 200 whose message has ``count`` calls of tool ``record``."""

    async def answer(request: web.Request, streamed: bool) -> web.StreamResponse:
        calls = [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "record", "arguments": json.dumps({"label": f"n{i}"})},
            }
            for i in range(count)
        ]
        body = completion({"role": "assistant", "content": None, "tool_calls": calls})
        body["choices"][0]["finish_reason"] = "tool_calls"
        return web.json_response(body)

    return answer


def raw(body: bytes, streamed_body: bytes | None = None) -> Behaviour:
    """``body`` as a plain 200 (``application/json``), or ``streamed_body`` as an event stream."""

    async def answer(request: web.Request, streamed: bool) -> web.StreamResponse:
        resp = await _open(request, streamed and streamed_body is not None)
        await resp.write(streamed_body if streamed and streamed_body is not None else body)
        await resp.write_eof()
        return resp

    return answer


class HostileModel(ScriptedModel):
    """A scripted model whose first requests get ``behaviours`` (one each, in order).

    Args:
        behaviours: what the first ``len(behaviours)`` requests get.
        script: the replies after them (see :class:`ScriptedModel`); keyword arguments too.

    Attributes:
        finished: per hostile request, seconds from its arrival until the client went away.
    """

    def __init__(
        self,
        behaviours: Iterable[Behaviour],
        script: Iterable[Reply | str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(script, **kwargs)
        self._behaviours: deque[Behaviour] = deque(behaviours)
        self.finished: list[float] = []

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        behaviour = self._behaviours.popleft() if self._behaviours else None
        if behaviour is None:
            return await super()._handle_chat(request)
        started = time.monotonic()
        body = json.loads(await request.read())
        self._log(body, request)
        try:
            return await behaviour(request, bool(body.get("stream")))
        except (ConnectionError, asyncio.CancelledError):
            raise
        finally:
            self.finished.append(time.monotonic() - started)

    def _log(self, body: dict[str, Any], request: web.Request) -> None:
        with self._lock:
            self._requests.append(
                RecordedRequest(
                    index=len(self._requests),
                    body=body,
                    headers={k.lower(): v for k, v in request.headers.items()},
                    received_at=time.monotonic(),
                )
            )
