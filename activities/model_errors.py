"""How a failed model call is told to Temporal: one ``ApplicationError`` per kind of failure.

:func:`classify_error` maps what the ``openai`` client, the HTTP layer
(:mod:`activities.model_limits`) and the reply's own checks raise to an error type of the
contract (``ModelUnavailable``, ``ModelOutputInvalid``, ``ModelRequestRejected``) and to whether
Temporal retries it. Used by ``model.complete`` (:mod:`activities.model`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast

import openai
from temporalio.exceptions import ApplicationError

from activities.contracts import (
    ERR_MODEL_OUTPUT_INVALID,
    ERR_MODEL_REQUEST_REJECTED,
    ERR_MODEL_UNAVAILABLE,
)
from activities.http_cap import ReplyTooLarge
from activities.model_limits import ReplyStalled
from activities.model_reply import TooManyToolCalls
from activities.streaming import ReplyCutOff

RETRYABLE_STATUS = frozenset({408, 409, 429})
"""HTTP statuses retried besides 5xx (as OpenAI's own client does, ``_should_retry``)."""

OUTPUT_INVALID_MARKERS = (
    "does not match the expected",
    "failed to parse",
    "parse tool call",
    "parse error",
)
"""Substrings of llama.cpp's 500 body when the model's output is not a valid tool call
(measured: docs/local-model-facts.md)."""


def _retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from ``retry-after-ms`` / ``retry-after`` headers (RFC 9110 §10.2.3, delta form)."""
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if ra:
        try:
            return max(0.0, float(ra))
        except ValueError:
            return None
    return None


def _server_message(err: openai.APIStatusError) -> str:
    body = err.body
    if isinstance(body, dict):
        fields = cast("dict[str, Any]", body)
        inner = fields.get("error", fields)
        message = cast("dict[str, Any]", inner).get("message") if isinstance(inner, dict) else None
        if message:
            return str(message)
        return json.dumps(fields)[:500]
    if body:
        return str(body)[:500]
    return err.message


def _classify_status_error(exc: openai.APIStatusError, last_attempt: bool) -> ApplicationError:
    """The :func:`classify_error` case of an HTTP error status from the model server."""
    status = exc.status_code
    message = _server_message(exc)
    delay = _retry_after_seconds(
        exc.response.headers
        if exc.response is not None  # pyright: ignore[reportUnnecessaryComparison] - defensive check
        else None
    )
    next_delay = timedelta(seconds=delay) if delay is not None else None
    if status >= 500 and any(m in message.lower() for m in OUTPUT_INVALID_MARKERS):
        return ApplicationError(
            f"model output could not be parsed (HTTP {status}): {message}",
            type=ERR_MODEL_OUTPUT_INVALID,
            non_retryable=last_attempt,
        )
    if status in RETRYABLE_STATUS or status >= 500:
        return ApplicationError(
            f"model server answered HTTP {status}: {message}",
            type=ERR_MODEL_UNAVAILABLE,
            next_retry_delay=next_delay,
        )
    return ApplicationError(
        f"model server rejected the request (HTTP {status}): {message}",
        {"status": status},
        type=ERR_MODEL_REQUEST_REJECTED,
        non_retryable=True,
    )


def classify_error(
    exc: BaseException, attempt: int = 1, max_invalid_attempts: int = 3
) -> ApplicationError:
    """Map a failure of the model call to an ``ApplicationError`` that Temporal retries or not.

    * 408, 409, 429, 5xx, connection errors and timeouts: retryable (``ModelUnavailable``),
      with ``next_retry_delay`` from ``retry-after`` when the server sends one.
    * A 500 whose body says the model's output could not be parsed, or a 200 the client could not
      read: ``ModelOutputInvalid``, retryable until ``attempt`` reaches ``max_invalid_attempts``,
      then non-retryable so the workflow can tell the model or end the run cleanly.
    * A reply cut off in transit (a stream or body that ends before a ``finish_reason``):
      retryable ``ModelUnavailable``; the retry sends the same request.
    * A reply past a limit of :mod:`activities.model_limits` (too many bytes, a stalled or
      trickling stream, no end within the attempt), even when the SDK wrapped it: retryable
      ``ModelUnavailable`` naming the limit.
    * A reply asking for more tool calls than ``MAX_TOOL_CALLS``: ``ModelOutputInvalid`` as
      above (the workflow then tells the model).
    * Any other 4xx: non-retryable ``ModelRequestRejected`` carrying the server's message
      (the run ends ``failed``).
    """
    over = _over_limit(exc)
    if over is not None:
        return ApplicationError(f"model reply {over}", type=ERR_MODEL_UNAVAILABLE)
    if isinstance(exc, TooManyToolCalls):
        return ApplicationError(
            f"model output unusable: {exc}",
            type=ERR_MODEL_OUTPUT_INVALID,
            non_retryable=attempt >= max_invalid_attempts,
        )
    if isinstance(exc, openai.APIStatusError):
        return _classify_status_error(exc, attempt >= max_invalid_attempts)
    if isinstance(exc, ReplyCutOff):
        return ApplicationError(f"model reply cut off: {exc}", type=ERR_MODEL_UNAVAILABLE)
    if isinstance(exc, openai.APIError) and not isinstance(
        exc, (openai.APIConnectionError, openai.APIResponseValidationError)
    ):
        # an error event inside a streamed reply (llama-server sends its parse failures this way)
        message = str(exc.body or exc.message)[:500]
        if any(m in message.lower() for m in OUTPUT_INVALID_MARKERS):
            return ApplicationError(
                f"model output could not be parsed (in stream): {message}",
                type=ERR_MODEL_OUTPUT_INVALID,
                non_retryable=attempt >= max_invalid_attempts,
            )
        return ApplicationError(f"model stream failed: {message}", type=ERR_MODEL_UNAVAILABLE)
    if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)):
        return ApplicationError(f"model server unreachable: {exc}", type=ERR_MODEL_UNAVAILABLE)
    if isinstance(
        exc, (openai.APIResponseValidationError, ValueError, KeyError, AttributeError, TypeError)
    ):
        return ApplicationError(
            f"model server sent a reply that could not be read: {type(exc).__name__}: {exc}",
            type=ERR_MODEL_OUTPUT_INVALID,
            non_retryable=attempt >= max_invalid_attempts,
        )
    return ApplicationError(
        f"model call failed: {type(exc).__name__}: {exc}", type=ERR_MODEL_UNAVAILABLE
    )


def _over_limit(exc: BaseException) -> str | None:
    """What limit ``exc`` (or an exception it was raised from) reports, as ``too large: ...``."""
    seen: BaseException | None = exc
    for _ in range(8):  # the SDK wraps at most once or twice
        if isinstance(seen, ReplyTooLarge):
            return f"too large: {seen}"
        if isinstance(seen, ReplyStalled):
            return f"stalled: {seen}"
        if seen is None:
            return None
        seen = seen.__cause__ or seen.__context__
    return None
