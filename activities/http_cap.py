"""HTTP response bodies that stop at a number of bytes, for servers nobody here wrote.

A model endpoint or an MCP server over HTTP may answer without end, or with hundreds of megabytes
the worker would hold whole before anything looks at them (measured: a 200 MB model reply held
730 MB of the worker, ``tests/integration/test_model_limits.py``). :func:`cap_response_hook` is an
``httpx2`` response hook: the body is counted as it arrives and the read fails with
:class:`ReplyTooLarge` past the cap; the rest is not read and the connection is closed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import httpx2

__all__ = ["ReplyTooLarge", "cap_response_hook"]


class ReplyTooLarge(Exception):
    """A response body went past its cap (the message names the cap and its setting)."""


class _CappedBody(httpx2.AsyncByteStream):
    """A response body that raises :class:`ReplyTooLarge` past ``cap`` bytes."""

    def __init__(self, body: httpx2.AsyncByteStream, cap: int, what: str) -> None:
        self._body = body
        self._cap = cap
        self._what = what

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = 0
        async for piece in self._body:
            received += len(piece)
            if received > self._cap:
                raise ReplyTooLarge(
                    f"{self._what} went past {self._cap} bytes; the rest was not read"
                )
            yield piece

    async def aclose(self) -> None:
        await self._body.aclose()


def cap_response_hook(max_bytes: int, what: str) -> Callable[[httpx2.Response], Awaitable[None]]:
    """An ``httpx2`` response hook capping each response body at ``max_bytes`` bytes.

    Args:
        max_bytes: the most bytes of one body, as received (headers not counted).
        what: how the error names the body and its setting, e.g. "the model server's reply
            (AGENT_MODEL_MAX_REPLY_BYTES)".
    """

    async def cap(response: httpx2.Response) -> None:
        if isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _CappedBody(response.stream, max_bytes, what)

    return cap
