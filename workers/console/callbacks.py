"""``POST /callbacks/{token}``: an outside system finishes a tool call that handed it a callback.

No console login: the signed token is the credential (activities/callbacks.py). The body is
``{"result": <any JSON>}`` (the call succeeds; a string is the text the model reads, anything
else its JSON) or ``{"error": "why"}`` (the call fails as a tool's business error: the model
reads ``Error: why``). The call's activity is completed through the Temporal client's
asynchronous activity handle (``client.get_async_activity_handle(task_token=...)``).

Answers: 200 ``{"status": "completed", "tool_call_id", "run_id"}``; 400 a malformed token or
body; 403 a forged token; 409 a token already used (here); 410 an expired token, or a call that
no longer waits (finished, timed out, cancelled: Temporal's answer, whichever ``serve`` took the
first callback); 413 a body over :data:`MAX_CALLBACK_BYTES`; 429 over the rate limit (per
address, with ``Retry-After``). Each answer is JSON ``{"error": reason}`` but the 200.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from temporalio.service import RPCError, RPCStatusCode

from activities.callbacks import CallbackRefused, CallbackSigner, verify_token
from activities.contracts import ToolOutcome
from activities.tools.output import shape
from workers.console.common import CLIENT_KEY

__all__ = [
    "CALLBACKS_KEY",
    "MAX_CALLBACK_BYTES",
    "CallbackBody",
    "CallbackState",
    "RateLimiter",
    "_callback",
]

MAX_CALLBACK_BYTES = 256 * 1024
"""Largest callback body: 256 KiB (the result goes into the run's history)."""
RATE_PER_SECOND = 20.0
"""Callbacks one address may send per second, sustained ..."""
RATE_BURST = 100
"""... and at once."""
USED_MEMORY = 100_000
"""Used tokens remembered (their digests); Temporal refuses older ones all the same (410)."""


class CallbackBody(BaseModel):
    """The body of ``POST /callbacks/{token}``: exactly one of ``result`` and ``error``."""

    model_config = ConfigDict(extra="forbid")

    result: Any = None
    error: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> CallbackBody:
        given = self.model_fields_set & {"result", "error"}
        if len(given) != 1:
            raise ValueError('send exactly one of "result" and "error"')
        if "error" in given and self.error is None:
            raise ValueError('"error" must be a string')
        return self


class RateLimiter:
    """A token bucket per client address: ``rate`` per second, ``burst`` at once."""

    def __init__(self, rate: float = RATE_PER_SECOND, burst: int = RATE_BURST) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def wait_seconds(self, who: str, now: float) -> float:
        """0 when ``who`` may go on now (one token taken), else the seconds until it may."""
        tokens, at = self._buckets.pop(who, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens >= 1:
            self._buckets[who] = (tokens - 1, now)
            wait = 0.0
        else:
            self._buckets[who] = (tokens, now)
            wait = (1 - tokens) / self.rate
        while len(self._buckets) > 10_000:
            self._buckets.popitem(last=False)
        return wait


class CallbackState:
    """What the route keeps: the key (via the signer), used tokens, the rate limiter."""

    def __init__(self, signer: CallbackSigner, limiter: RateLimiter | None = None) -> None:
        self.signer = signer
        self.limiter = limiter or RateLimiter()
        self.used: OrderedDict[str, None] = OrderedDict()

    def use(self, digest: str) -> bool:
        """Mark ``digest`` used; False when it already was."""
        if digest in self.used:
            return False
        self.used[digest] = None
        while len(self.used) > USED_MEMORY:
            self.used.popitem(last=False)
        return True


CALLBACKS_KEY = web.AppKey("callbacks", CallbackState)


def _refuse(status: int, reason: str, **headers: str) -> web.Response:
    return web.json_response({"error": reason}, status=status, headers=headers or None)


def _outcome(body: CallbackBody, call_id: str, name: str, limit: int, ms: float) -> ToolOutcome:
    if body.error is not None:
        text, status = f"Error: {body.error}", "error"
    else:
        r = body.result
        text = r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)
        status = "ok"
    content, truncated, chars = shape(text, limit)
    return ToolOutcome(
        call_id=call_id,
        name=name,
        status=status,
        content=content,
        truncated=truncated,
        output_chars=chars,
        duration_ms=ms,
    )


async def _read_body(request: web.Request) -> CallbackBody | web.Response:
    if (request.content_length or 0) > MAX_CALLBACK_BYTES:
        return _refuse(413, f"the body is over {MAX_CALLBACK_BYTES} bytes")
    raw = await request.content.read(MAX_CALLBACK_BYTES + 1)
    if len(raw) > MAX_CALLBACK_BYTES:
        return _refuse(413, f"the body is over {MAX_CALLBACK_BYTES} bytes")
    try:
        return CallbackBody.model_validate(json.loads(raw or b"{}"))
    except RecursionError:
        return _refuse(400, "the body nests too deeply")
    except ValidationError as e:
        return _refuse(400, f"bad body: {e.errors()[0]['msg']}")
    except ValueError as e:
        return _refuse(400, f"the body is not JSON: {e}")


async def _callback(request: web.Request) -> web.Response:
    """``POST /callbacks/{token}`` (see the module docstring)."""
    state = request.app[CALLBACKS_KEY]
    now = time.time()
    wait = state.limiter.wait_seconds(request.remote or "?", time.monotonic())
    if wait > 0:
        return _refuse(429, "too many callbacks", **{"Retry-After": str(max(1, round(wait)))})
    try:
        claims = verify_token(state.signer.key(), request.match_info["token"], now)
    except CallbackRefused as e:
        return _refuse(e.status, e.reason)
    body = await _read_body(request)
    if isinstance(body, web.Response):
        return body
    digest = claims.digest()
    if not state.use(digest):
        return _refuse(409, "this callback token was already used")
    ms = max(0.0, (now - claims.issued_at) * 1000) if claims.issued_at else 0.0
    outcome = _outcome(body, claims.call_id, claims.name, claims.max_output_chars, ms)
    handle = request.app[CLIENT_KEY].get_async_activity_handle(task_token=claims.token_bytes())
    try:
        await handle.complete(outcome)
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return _refuse(410, "the tool call no longer waits (finished, timed out or cancelled)")
        state.used.pop(digest, None)  # not taken: the caller may try again
        raise
    return web.json_response(
        {"status": "completed", "tool_call_id": claims.call_id, "run_id": claims.run_id}
    )
