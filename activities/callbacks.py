"""Tools finished later: a callback URL signed for one tool call, and its check.

A tool marked ``@tool(callback=True)`` may hand an outside system ``ctx.callback_url()`` and
then call ``activity.raise_complete_async()``: its activity stays open (Temporal's asynchronous
activity completion) until ``POST /callbacks/{token}`` on ``agentctl serve`` completes it with
the outside system's result (workers/console/callbacks.py), or its timeout passes.

The token is ``<payload>.<mac>``: ``payload`` the base64url of the canonical JSON of
:class:`CallbackClaims` (the attempt's Temporal task token, the call, the expiry), ``mac`` the
base64url HMAC-SHA256 of ``payload`` under the runtime's callback key (``AGENT_CALLBACK_KEY`` or
``<AGENT_STATE_DIR>/callback-key``, workers/callback_keys.py), which the worker and
``agentctl serve`` share. The token expires when the attempt does (its start plus its
start-to-close timeout, or its schedule-to-close deadline if sooner). The MAC is compared in
constant time (:func:`hmac.compare_digest`). Sources: RFC 2104 (HMAC), RFC 4648 section 5
(base64url); Temporal's docs, "Asynchronous Activity Completion".
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ValidationError

__all__ = [
    "MIN_KEY_BYTES",
    "CallbackClaims",
    "CallbackRefused",
    "CallbackSigner",
    "sign_token",
    "verify_token",
]

MIN_KEY_BYTES = 32
"""Shortest callback key accepted: 32 bytes (256 bits, the size of HMAC-SHA256's output)."""
MAX_TOKEN_CHARS = 4096
"""Longest token read; a longer one is refused before any decoding."""


class CallbackRefused(Exception):
    """A callback that cannot be taken: ``status`` is the HTTP status, ``reason`` says why."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class CallbackClaims(BaseModel):
    """What a callback token vouches for.

    ``task_token`` is the base64 of the activity attempt's Temporal task token; ``issued_at``
    and ``expires_at`` Unix seconds; ``max_output_chars`` the cut of the result's text (the spec's
    ``max_tool_output_chars``).
    """

    task_token: str
    run_id: str
    call_id: str
    name: str
    max_output_chars: int = 16_000
    issued_at: float = 0.0
    expires_at: float

    def token_bytes(self) -> bytes:
        """The Temporal task token, decoded."""
        return base64.b64decode(self.task_token)

    def digest(self) -> str:
        """A short, stable id of the call's attempt (for logs and the used-token memory)."""
        return hashlib.sha256(self.task_token.encode()).hexdigest()[:32]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, payload: str) -> bytes:
    return hmac.new(key, payload.encode(), hashlib.sha256).digest()


def sign_token(key: bytes, claims: CallbackClaims) -> str:
    """The token of ``claims`` under ``key`` (see the module docstring)."""
    body = json.dumps(claims.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    payload = _b64(body.encode())
    return f"{payload}.{_b64(_mac(key, payload))}"


def verify_token(key: bytes, token: str, now: float) -> CallbackClaims:
    """The claims of a token signed with ``key`` and not expired at ``now`` (Unix seconds).

    Raises:
        CallbackRefused: 400 a malformed token, 403 a forged one (its MAC does not match),
            410 an expired one.
    """
    if len(token) > MAX_TOKEN_CHARS or token.count(".") != 1:
        raise CallbackRefused(400, "malformed callback token")
    payload, mac = token.split(".")
    try:
        sent = _unb64(mac)
    except ValueError:
        raise CallbackRefused(400, "malformed callback token") from None
    if not hmac.compare_digest(sent, _mac(key, payload)):
        raise CallbackRefused(403, "forged callback token (its signature does not match)")
    try:
        data: Any = json.loads(_unb64(payload))
        claims = CallbackClaims.model_validate(data)
    except (ValueError, ValidationError):
        raise CallbackRefused(400, "malformed callback token") from None
    if now >= claims.expires_at:
        raise CallbackRefused(410, "expired callback token (the tool call's time is over)")
    return claims


class CallbackSigner:
    """Signs callback URLs for a worker's tool calls.

    Args:
        key: the callback key (at least :data:`MIN_KEY_BYTES` bytes), or what reads it: called
            once, when the first URL is signed (a worker whose tools never ask reads no key).
        base_url: where ``agentctl serve`` answers the outside system (``AGENT_CALLBACK_URL``),
            e.g. ``https://agents.example.com``; the URL is ``<base_url>/callbacks/<token>``.
    """

    def __init__(self, key: bytes | Callable[[], bytes], base_url: str) -> None:
        self._key: bytes | None = key if isinstance(key, bytes) else None
        self._read: Callable[[], bytes] | None = None if isinstance(key, bytes) else key
        self.base_url = base_url.rstrip("/")

    def key(self) -> bytes:
        """The key (read on first use).

        Raises:
            ValueError: it is shorter than :data:`MIN_KEY_BYTES`.
        """
        if self._key is None:
            assert self._read is not None
            self._key = self._read()
        if len(self._key) < MIN_KEY_BYTES:
            raise ValueError(
                f"the callback key has {len(self._key)} bytes; at least {MIN_KEY_BYTES}"
            )
        return self._key

    def url(self, claims: CallbackClaims) -> str:
        """``<base_url>/callbacks/<token>`` for ``claims``."""
        return f"{self.base_url}/callbacks/{sign_token(self.key(), claims)}"

    def for_current_activity(self, run_id: str, call_id: str, name: str, max_chars: int) -> str:
        """The callback URL of the running activity attempt (inside ``tool.invoke``).

        The token expires with the attempt: its start plus its start-to-close timeout, or its
        schedule-to-close deadline if that comes first (one hour when it has neither).

        Raises:
            RuntimeError: not in an activity.
        """
        from temporalio import activity

        info = activity.info()
        ends = [info.started_time + (info.start_to_close_timeout or timedelta(hours=1))]
        if info.schedule_to_close_timeout:
            ends.append(info.scheduled_time + info.schedule_to_close_timeout)
        claims = CallbackClaims(
            task_token=base64.b64encode(info.task_token).decode(),
            run_id=run_id,
            call_id=call_id,
            name=name,
            max_output_chars=max_chars,
            issued_at=time.time(),
            expires_at=min(ends).timestamp(),
        )
        return self.url(claims)
