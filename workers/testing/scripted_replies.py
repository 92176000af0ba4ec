"""What :class:`~workers.testing.scripted_model.ScriptedModel` answers: replies and their JSON.

:class:`Reply` and its constructors (:func:`text`, :func:`tool_call`, :func:`tool_calls`,
:func:`error`, :func:`garbage`, :func:`call_tool_then_answer`), the :class:`RecordedRequest` a
test reads back, and the pure pieces of answering: which script a request belongs to and the
OpenAI ``chat.completion`` object of a reply. No HTTP here; the server is in
:mod:`workers.testing.scripted_model`, which re-exports every public name.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from workers.testing.prefix_cache import PrefixCache

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_denied", None),
    404: ("invalid_request_error", "model_not_found"),
    408: ("timeout", None),
    409: ("conflict", None),
    422: ("invalid_request_error", None),
    429: ("rate_limit_exceeded", "rate_limit_exceeded"),
}


# --------------------------------------------------------------------------------------------
# Replies
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One function call inside an assistant reply.

    Attributes:
        name: the function (tool) name.
        arguments: the arguments exactly as sent on the wire: JSON text, normally an object.
            It is not validated, so a test can send malformed arguments on purpose.
        id: the tool call id; ``None`` lets the server assign ``call_<n>`` (``n`` counts from 1
            per server, across all replies).
    """

    name: str
    arguments: str = "{}"
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """What the server answers to one request.

    Build replies with :func:`text`, :func:`tool_call`, :func:`tool_calls`, :func:`error` or
    :func:`garbage` rather than directly; :meth:`with_delay` adds a delay to any of them.

    Attributes:
        kind: ``"message"`` (a 200 chat completion), ``"error"`` (an HTTP error status) or
            ``"garbage"`` (a raw body that is not a chat completion).
        content: assistant text for ``"message"``; may be ``None`` when there are tool calls.
        tool_calls: the calls of a ``"message"`` reply, in order.
        finish_reason: overrides the computed ``finish_reason`` (``"tool_calls"`` when there are
            calls, else ``"stop"``), e.g. ``"length"``.
        status: the HTTP status code.
        body: for ``"error"``: a JSON-able value, or a ``str`` sent as-is, or ``None`` for an
            OpenAI-style default error body; for ``"garbage"``: the raw text.
        headers: extra response headers, as ``(name, value)`` pairs.
        content_type: the response ``Content-Type`` for ``"garbage"`` and ``str`` error bodies.
        delay: seconds to wait (asynchronously) before answering, on top of the server's
            ``latency``.
        chunk_delay: when streamed, seconds between two chunks (None: the server's
            ``chunk_delay``).
        cut_after: a fault: the connection is closed after this many chunks when streamed (no
            ``finish_reason``, no ``[DONE]``), or a non-streamed body is cut to this many bytes
            (what a proxy or provider that drops a reply sends). None: the whole reply.
    """

    kind: Literal["message", "error", "garbage"] = "message"
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    status: int = 200
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str | None = None
    delay: float = 0.0
    chunk_delay: float | None = None
    cut_after: int | None = None

    def cut(self, after: int) -> Reply:
        """A copy whose reply is cut off after ``after`` chunks (streamed) or bytes (plain)."""
        if after < 0:
            raise ValueError(f"cut_after must be >= 0, got {after}")
        return dataclasses.replace(self, cut_after=after)

    def with_chunk_delay(self, seconds: float) -> Reply:
        """A copy whose streamed chunks (``stream: true``) are sent ``seconds`` apart."""
        return dataclasses.replace(self, chunk_delay=_check_delay(seconds))

    def with_delay(self, seconds: float) -> Reply:
        """Return a copy of this reply answered after ``seconds`` (>= 0) of extra delay."""
        return dataclasses.replace(self, delay=_check_delay(seconds))


Responder = Callable[[dict[str, Any]], "Reply | str | Awaitable[Reply | str]"]
"""A function of the request JSON (a dict) returning the :class:`Reply` (a ``str`` is shorthand
for :func:`text`); it may be ``async``. It runs on the server's event loop: keep it fast and
non-blocking. If it raises, the request is answered with HTTP 500 naming the exception."""


def _check_delay(seconds: float) -> float:
    seconds = float(seconds)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"delay must be a finite number of seconds >= 0, got {seconds!r}")
    return seconds


def _arguments_text(arguments: Mapping[str, Any] | str) -> str:
    if isinstance(arguments, str):
        return arguments
    if isinstance(arguments, Mapping):
        return json.dumps(dict(arguments))
    raise TypeError(f"tool arguments must be a dict or a JSON string, got {type(arguments)!r}")


def text(content: str, *, finish_reason: str | None = None, delay: float = 0.0) -> Reply:
    """An assistant message with text ``content`` (HTTP 200, ``finish_reason="stop"``).

    Args:
        content: the assistant's text.
        finish_reason: override ``"stop"``, e.g. ``"length"`` to simulate truncation.
        delay: seconds (>= 0) to wait before answering.
    """
    return Reply(content=content, finish_reason=finish_reason, delay=_check_delay(delay))


def tool_call(
    name: str,
    arguments: Mapping[str, Any] | str | None = None,
    id: str | None = None,
    *,
    content: str | None = None,
    delay: float = 0.0,
) -> Reply:
    """An assistant message with one tool call (HTTP 200, ``finish_reason="tool_calls"``).

    Args:
        name: the function name.
        arguments: a dict (serialised with ``json.dumps``) or raw JSON text sent unchanged (so it
            may be malformed on purpose); ``None`` means ``{}``.
        id: the tool call id; ``None`` assigns ``call_<n>``.
        content: optional assistant text sent alongside the call.
        delay: seconds (>= 0) to wait before answering.

    Raises:
        TypeError: ``arguments`` is neither a mapping nor a string.
    """
    call = ToolCall(
        name=name, arguments=_arguments_text({} if arguments is None else arguments), id=id
    )
    return Reply(content=content, tool_calls=(call,), delay=_check_delay(delay))


def tool_calls(
    calls: Iterable[Reply | ToolCall | tuple[str, Mapping[str, Any] | str]],
    *,
    content: str | None = None,
    delay: float = 0.0,
) -> Reply:
    """An assistant message with several tool calls in one reply (parallel tool calls).

    Args:
        calls: each item is a :func:`tool_call` reply (its calls are taken), a :class:`ToolCall`,
            or a ``(name, arguments)`` pair.
        content: optional assistant text sent alongside the calls.
        delay: seconds (>= 0) to wait before answering.

    Raises:
        ValueError: ``calls`` is empty.
        TypeError: an item is of another type.
    """
    out: list[ToolCall] = []
    for item in calls:
        if isinstance(item, Reply):
            if not item.tool_calls:
                raise TypeError("tool_calls() items must carry tool calls; got a reply without")
            out.extend(item.tool_calls)
        elif isinstance(item, ToolCall):
            out.append(item)
        elif isinstance(item, tuple) and len(item) == 2:
            out.append(ToolCall(name=item[0], arguments=_arguments_text(item[1])))
        else:
            raise TypeError(f"unsupported tool_calls() item: {item!r}")
    if not out:
        raise ValueError("tool_calls() needs at least one call")
    return Reply(content=content, tool_calls=tuple(out), delay=_check_delay(delay))


def error(
    status: int,
    body: Any = None,
    headers: Mapping[str, str] | None = None,
    *,
    delay: float = 0.0,
) -> Reply:
    """An HTTP error answer, e.g. ``error(429, headers={"retry-after": "1"})``.

    The ``openai`` client maps the status to its exception classes (400 ``BadRequestError``,
    401 ``AuthenticationError``, 429 ``RateLimitError``, >= 500 ``InternalServerError``, ...);
    the headers are on the exception's ``.response.headers`` and a JSON body's ``error.message``
    in its message.

    Args:
        status: HTTP status code, 400..599.
        body: a JSON-able value sent as ``application/json``; a ``str`` sent as ``text/plain``;
            or ``None`` for an OpenAI-style ``{"error": {"message", "type", "param", "code"}}``.
        headers: extra response headers.
        delay: seconds (>= 0) to wait before answering.

    Raises:
        ValueError: ``status`` is not in 400..599.
    """
    if not 400 <= status <= 599:
        raise ValueError(f"error status must be 400..599, got {status}")
    return Reply(
        kind="error",
        status=status,
        body=body,
        headers=tuple((headers or {}).items()),
        content_type="text/plain" if isinstance(body, str) else None,
        delay=_check_delay(delay),
    )


def garbage(
    body: str,
    *,
    status: int = 200,
    content_type: str = "application/json",
    delay: float = 0.0,
) -> Reply:
    """A raw answer that is not a chat completion (a broken proxy, a truncated body...).

    With the default ``Content-Type: application/json`` and a non-JSON ``body`` the ``openai``
    client raises ``json.JSONDecodeError`` (a ``ValueError``) when parsing. With ``text/plain``
    the client does not raise: it returns the body as a ``str`` instead of a completion.

    Args:
        body: the response body text.
        status: HTTP status code.
        content_type: the ``Content-Type`` header.
        delay: seconds (>= 0) to wait before answering.
    """
    return Reply(
        kind="garbage",
        status=status,
        body=body,
        content_type=content_type,
        delay=_check_delay(delay),
    )


def _as_reply(value: Any, where: str) -> Reply:
    if isinstance(value, Reply):
        return value
    if isinstance(value, str):
        return text(value)
    raise TypeError(f"{where} must be a Reply (or str), got {type(value).__name__}: {value!r}")


def call_tool_then_answer(
    name: str,
    arguments: Mapping[str, Any] | str | None = None,
    answer: str = "done",
) -> Callable[[dict[str, Any]], Reply]:
    """A stateless responder: call tool ``name`` once, then answer ``answer``.

    It answers ``text(answer)`` if the request's last message is a tool result, else
    ``tool_call(name, arguments)``. Every conversation thus makes exactly one tool call and then
    finishes, however many run at once -- the shape benchmarks use.
    """
    call = tool_call(name, arguments)
    final = text(answer)

    def respond(request: dict[str, Any]) -> Reply:
        messages = request.get("messages") or []
        if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "tool":
            return final
        return call

    return respond


def _always(reply: Reply) -> Callable[[dict[str, Any]], Reply]:
    """A responder answering ``reply`` to every request."""

    def respond(request: dict[str, Any]) -> Reply:
        return reply

    return respond


# --------------------------------------------------------------------------------------------
# Recorded requests
# --------------------------------------------------------------------------------------------


@dataclass
class RecordedRequest:
    """One chat-completions request the server received.

    Every request whose body is a JSON object is recorded, including rejected ones
    (``stream=true``); bodies that are not JSON objects are answered 400 and not recorded.

    Attributes:
        index: 0-based arrival order.
        body: the request JSON as sent (``model``, ``messages``, ``tools``, ...). Do not mutate.
        headers: the request headers (e.g. ``authorization``), lower-cased names.
        received_at: arrival time, seconds on the ``time.monotonic()`` clock (same process).
        replied_at: when the answer was sent (after any delay), same clock; ``None`` while pending.
        status: the HTTP status answered; ``None`` while pending.
        reply: the :class:`Reply` used; ``None`` while pending or for internal errors.
    """

    index: int
    body: dict[str, Any]
    headers: dict[str, str]
    received_at: float
    replied_at: float | None = None
    status: int | None = None
    reply: Reply | None = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's ``messages`` list (empty if absent)."""
        return list(self.body.get("messages") or [])

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The request's ``tools`` list (empty if absent)."""
        return list(self.body.get("tools") or [])

    @property
    def duration(self) -> float | None:
        """Seconds between arrival and answer; ``None`` while pending."""
        return None if self.replied_at is None else self.replied_at - self.received_at


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    """Text of a message ``content``: a string, or a list of parts (``{"type": "text"}``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return ""


def _approx_tokens(chars: int) -> int:
    """A rough token count: 4 characters per token, rounded up."""
    return (chars + 3) // 4


def _message_chars(message: Any) -> int:
    if not isinstance(message, dict):
        return 0
    n = len(_text_of(message.get("content")))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            n += len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or ""))
    return n


def _error_body(
    status: int, message: str, code: str | None = None, param: str | None = None
) -> dict:
    etype, default_code = _ERROR_TYPES.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    return {
        "error": {"message": message, "type": etype, "param": param, "code": code or default_code}
    }


class _InternalError(Exception):
    """A request the server cannot answer from its script; becomes an HTTP error."""

    def __init__(self, status: int, message: str, code: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.param = param


def first_user_text(body: dict[str, Any]) -> str:
    """The text of the first ``user`` message of a chat-completions request body ("" if none)."""
    first_user = next(
        (m for m in body.get("messages") or [] if isinstance(m, dict) and m.get("role") == "user"),
        None,
    )
    return _text_of(first_user.get("content")) if first_user else ""


def conversation_marker(
    markers: Collection[str], body: dict[str, Any], has_default: bool
) -> str | None:
    """The one marker contained in the request's first user message; None for the default reply.

    Raises:
        _InternalError: several markers match, or none does and there is no default reply.
    """
    user_text = first_user_text(body)
    matches = [marker for marker in markers if marker in user_text]
    if len(matches) > 1:
        raise _InternalError(
            500,
            f"ScriptedModel: first user message matches several markers {matches!r}",
            "ambiguous_conversation_marker",
        )
    if matches:
        return matches[0]
    if has_default:
        return None
    raise _InternalError(
        500,
        f"ScriptedModel: no script marker in the first user message (markers: {list(markers)!r})",
        "no_script_for_conversation",
    )


def _cached_tokens(cache: PrefixCache, messages: list[Any]) -> int:
    return _approx_tokens(
        sum(_message_chars(m) for m in messages[: cache.cached_messages(messages)])
    )


def completion_payload(
    n: int,
    model: str,
    message: dict[str, Any],
    finish: str,
    messages: list[Any],
    cache: PrefixCache | None = None,
) -> dict[str, Any]:
    """The ``chat.completion`` object number ``n`` answering ``messages`` with ``message``.

    Usage is approximated from characters (:func:`_approx_tokens`), prompt and completion; with
    ``cache``, its ``prompt_tokens_details.cached_tokens`` too.
    """
    prompt_tokens = _approx_tokens(sum(_message_chars(m) for m in messages))
    completion_tokens = _approx_tokens(_message_chars(message))
    return {
        "id": f"chatcmpl-scripted-{n}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            **(
                {"prompt_tokens_details": {"cached_tokens": _cached_tokens(cache, messages)}}
                if cache is not None
                else {}
            ),
        },
    }
