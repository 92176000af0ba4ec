"""Server-Sent Events rendering of a chat completion for :mod:`workers.testing.scripted_model`.

A ``stream: true`` request is answered the way OpenAI's API and llama-server answer it: a
``text/event-stream`` of ``chat.completion.chunk`` objects (a role chunk, the text in pieces of
``chunk_chars`` characters, each tool call as a first chunk with its id and name followed by its
``arguments`` in pieces, a chunk with the ``finish_reason``, and a usage chunk with no choices when
the request asked for ``stream_options.include_usage``), then ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web


def _pieces(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


def completion_chunks(
    completion: dict[str, Any], chunk_chars: int, include_usage: bool
) -> list[dict[str, Any]]:
    """The chunks of a streamed reply equal to the non-streamed ``completion`` (a dict).

    Tool-call arguments are cut into pieces of ``chunk_chars`` characters too, so a client must
    join them by ``index`` to get them back.
    """
    base = {
        k: completion[k]
        for k in ("id", "created", "model", "system_fingerprint")
        if k in completion
    }
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            **base,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in _pieces(message.get("content") or "", chunk_chars)]
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        head = {"index": i, "id": call["id"], "type": "function"}
        out.append(
            chunk({"tool_calls": [{**head, "function": {"name": fn["name"], "arguments": ""}}]})
        )
        for p in _pieces(fn["arguments"], chunk_chars):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]}))
    out.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        out.append({**base, "choices": [], "usage": completion["usage"]})
    return out


async def write_event_stream(
    request: web.Request,
    chunks: list[dict[str, Any]],
    delay: float,
    headers: dict[str, str] | None = None,
    cut_after: int | None = None,
    on_sent: Callable[[dict[str, Any]], None] | None = None,
) -> web.StreamResponse:
    """Send ``chunks`` as SSE ``data:`` lines, ``delay`` seconds apart, then ``data: [DONE]``.

    ``cut_after``: a fault; the connection is closed after that many chunks, with no
    ``finish_reason`` chunk and no ``[DONE]``. ``on_sent``: called with each chunk once written.
    """
    resp = web.StreamResponse(
        status=200,
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-cache",
            **(headers or {}),
        },
    )
    await resp.prepare(request)
    for i, c in enumerate(chunks):
        if cut_after is not None and i >= cut_after:
            await resp.write_eof()
            return resp
        await resp.write(f"data: {json.dumps(c)}\n\n".encode())
        if on_sent is not None:
            on_sent(c)
        if delay > 0:
            await asyncio.sleep(delay)
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


class ChunkLog:
    """Thread-safe record of ``(completion number, time.monotonic() once written, text)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[tuple[int, float, str]] = []

    def hook(self, completion: int) -> Callable[[dict[str, Any]], None]:
        """The ``on_sent`` callback of completion number ``completion`` (counted from 1)."""

        def sent(chunk: dict[str, Any]) -> None:
            choices = chunk.get("choices") or []
            text = (choices[0].get("delta") or {}).get("content") if choices else None
            if text:
                with self._lock:
                    self._entries.append((completion, time.monotonic(), text))

        return sent

    def entries(self) -> list[tuple[int, float, str]]:
        """Every streamed text chunk so far, in the order written."""
        with self._lock:
            return list(self._entries)
