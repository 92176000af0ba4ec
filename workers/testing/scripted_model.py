"""A scripted, OpenAI-compatible chat-completions server for tests, benchmarks and demos.

:class:`ScriptedModel` is a real HTTP server (aiohttp) on ``127.0.0.1`` that speaks the subset of
the OpenAI API an agent needs -- ``POST /v1/chat/completions`` (plain, or streamed as Server-Sent
Events when the request says ``stream: true``, see :mod:`workers.testing._sse`) and
``GET /v1/models`` -- and answers from a script of :class:`Reply` objects instead of a model. Tests
therefore exercise the real ``openai`` client, its parsing and its error classes::

    from workers.testing.scripted_model import ScriptedModel, text, tool_call, error

    with ScriptedModel([tool_call("list_files", {"path": "."}), text("done")]) as model:
        client = openai.AsyncOpenAI(base_url=model.base_url, api_key="test", max_retries=0)
        ...
        assert model.count == 2
        assert model.last_messages()[-1]["role"] == "tool"

The server runs its own event loop in a background thread, so it works the same from sync tests,
async tests (any event loop) and from other processes (e.g. a Temporal worker subprocess pointed
at :attr:`ScriptedModel.base_url`). Artificial delays are ``asyncio.sleep`` calls on that loop, so
thousands of concurrent requests overlap instead of queueing.

Where each reply comes from -- exactly one of:

* ``script=[...]``: one shared queue, consumed one reply per request, in arrival order.
* ``scripts={"marker": [...], ...}``: one queue per conversation, chosen by which marker string is
  contained in the text of the request's *first user message*. Lets concurrent runs in one test
  each get their own script: put a unique marker (e.g. ``"[run-3]"``) in each run's prompt.
* ``responder=fn``: ``fn(request_json) -> Reply`` (or an awaitable of one) is called for every
  request; stateless responders scale to any number of concurrent runs (benchmarks).

When a queue runs out (or no marker matches), ``default`` answers if given; otherwise the server
answers HTTP 500 with an OpenAI-style error body whose code is ``script_exhausted`` (or
``no_script_for_conversation``), which the ``openai`` client raises as
``openai.InternalServerError``.

Run ``python -m workers.testing.scripted_model --help`` for a stand-alone server for manual tries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import typer
from aiohttp import web

from workers.entrypoints import run_command
from workers.testing._sse import completion_chunks, write_event_stream

if TYPE_CHECKING:  # pragma: no cover
    import openai

__all__ = [
    "Reply",
    "ToolCall",
    "RecordedRequest",
    "Responder",
    "ScriptedModel",
    "text",
    "tool_call",
    "tool_calls",
    "error",
    "garbage",
    "call_tool_then_answer",
    "main",
]

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


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


class ScriptedModel:
    """An OpenAI-compatible chat-completions server answering from a script.

    Args:
        script: replies consumed in order, one per request (a ``str`` is shorthand for
            :func:`text`).
        scripts: per-conversation scripts: ``{marker: [replies...]}``. A request uses the script
            whose marker is a substring of its first user message's text; if several markers
            match, the request is answered HTTP 500 (``ambiguous_conversation_marker``).
        responder: computes each reply from the request JSON (see :data:`Responder`).
        default: the reply used whenever a script is exhausted or no marker matches, reused
            without being consumed. Without it those requests get HTTP 500.
        latency: seconds (>= 0) added before every answer, on top of each reply's ``delay``.
        model: the model id reported by ``GET /v1/models`` and in every completion.
        host: the interface to bind; keep the loopback default.
        port: the TCP port; 0 picks a free one (read :attr:`port` after :meth:`start`).
        chunk_chars: characters of text (and of tool-call arguments) per streamed chunk.
        chunk_delay: seconds between two streamed chunks (a reply's ``chunk_delay`` overrides).
        stream_usage: send the usage chunk when a streamed request asks for it
            (``stream_options.include_usage``); False plays a server that never sends usage.

    At most one of ``script``, ``scripts`` and ``responder`` may be given (none: every request
    gets ``default``); ``default`` cannot be combined with ``responder``.

    Raises:
        ValueError: conflicting sources, a negative ``latency``, an empty marker.
        TypeError: a script item is not a :class:`Reply` or ``str``.

    Use as ``with ScriptedModel(...) as m:`` / ``async with ...`` or call :meth:`start` and
    :meth:`stop`. All public methods and properties are thread-safe.
    """

    def __init__(
        self,
        script: Iterable[Reply | str] | None = None,
        *,
        scripts: Mapping[str, Iterable[Reply | str]] | None = None,
        responder: Responder | None = None,
        default: Reply | str | None = None,
        latency: float = 0.0,
        model: str = "scripted",
        host: str = "127.0.0.1",
        port: int = 0,
        chunk_chars: int = 4,
        chunk_delay: float = 0.0,
        stream_usage: bool = True,
    ) -> None:
        self.chunk_chars = max(1, int(chunk_chars))
        self.chunk_delay = _check_delay(chunk_delay)
        self.stream_usage = stream_usage
        given = [
            n
            for n, v in (("script", script), ("scripts", scripts), ("responder", responder))
            if v is not None
        ]
        if len(given) > 1:
            raise ValueError(
                f"give at most one of script, scripts, responder; got {', '.join(given)}"
            )
        if responder is not None and default is not None:
            raise ValueError("default is not used with responder; have the responder return it")
        if responder is not None and not callable(responder):
            raise TypeError("responder must be callable")
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque(_as_reply(r, "script item") for r in (script or ()))
        self._scripts: dict[str, deque[Reply]] | None = None
        if scripts is not None:
            self._scripts = {}
            for marker, replies in scripts.items():
                if not marker:
                    raise ValueError("scripts markers must be non-empty strings")
                self._scripts[marker] = deque(
                    _as_reply(r, f"scripts[{marker!r}] item") for r in replies
                )
        self._responder = responder
        self._default = None if default is None else _as_reply(default, "default")
        self._latency = _check_delay(latency)
        self.model = model
        self.host = host
        self._requested_port = port
        self._requests: list[RecordedRequest] = []
        self._call_counter = 0
        self._completion_counter = 0
        self._consumed = 0
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> ScriptedModel:
        """Start serving in a background thread; returns ``self`` once the port is bound.

        Raises:
            RuntimeError: already running, or the server failed to start within ``timeout``
                seconds (the cause, e.g. ``OSError`` for a port in use, is chained).
        """
        if self._thread is not None:
            raise RuntimeError("ScriptedModel is already running")
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # handed to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                try:
                    loop.run_until_complete(loop.shutdown_asyncgens())
                finally:
                    loop.close()

        thread = threading.Thread(
            target=run, name=f"ScriptedModel:{self._requested_port}", daemon=True
        )
        thread.start()
        if not ready.wait(timeout):
            raise RuntimeError(f"ScriptedModel did not start within {timeout} s")
        if failure:
            thread.join()
            raise RuntimeError(f"ScriptedModel failed to start: {failure[0]}") from failure[0]
        self._loop, self._thread = loop, thread
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and join the thread; requests still in flight are cut off.

        Idempotent. The recorded requests are kept; the server may be started again.
        """
        thread, loop, runner = self._thread, self._loop, self._runner
        if thread is None or loop is None:
            return
        try:
            if runner is not None:
                fut = asyncio.run_coroutine_threadsafe(runner.cleanup(), loop)
                try:
                    fut.result(timeout)
                except Exception:  # best effort: the loop is stopped below anyway
                    fut.cancel()
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        finally:
            self._thread = self._loop = self._runner = None
            self._port = None

    def __enter__(self) -> ScriptedModel:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedModel:
        return await asyncio.to_thread(self.start)

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)

    async def _serve(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._handle_chat)
        app.router.add_get("/v1/models", self._handle_models)
        # No access log (benchmarks send thousands of requests); a short shutdown grace period so
        # stop() does not wait for slow scripted delays.
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._requested_port, backlog=4096)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = runner.addresses[0][1]

    # ---- addresses ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound TCP port.

        Raises:
            RuntimeError: the server is not running.
        """
        if self._port is None:
            raise RuntimeError(
                "ScriptedModel is not running; call start() or use it as a context manager"
            )
        return self._port

    @property
    def base_url(self) -> str:
        """The OpenAI ``base_url``: ``http://127.0.0.1:<port>/v1``.

        Raises:
            RuntimeError: the server is not running.
        """
        return f"http://{self.host}:{self.port}/v1"

    def openai_client(self, **kwargs: Any) -> openai.AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` for this server (``api_key="test"``, ``max_retries=0``).

        Keyword arguments override those defaults or add others (e.g. ``timeout``).
        """
        import openai

        options: dict[str, Any] = {"base_url": self.base_url, "api_key": "test", "max_retries": 0}
        options.update(kwargs)
        return openai.AsyncOpenAI(**options)

    # ---- script and records ------------------------------------------------------------------

    def extend(self, replies: Iterable[Reply | str], marker: str | None = None) -> None:
        """Append replies to the shared script, or to the script of ``marker`` (created if new).

        Raises:
            ValueError: a ``marker`` for a server without ``scripts``, or none for one with them,
                or this server uses a ``responder``.
        """
        if self._responder is not None:
            raise ValueError("this ScriptedModel uses a responder; it has no script to extend")
        items = [_as_reply(r, "script item") for r in replies]
        with self._lock:
            if self._scripts is None:
                if marker is not None:
                    raise ValueError(
                        "marker given, but this ScriptedModel was built without scripts="
                    )
                self._script.extend(items)
            else:
                if not marker:
                    raise ValueError("this ScriptedModel uses scripts=; name the marker to extend")
                self._scripts.setdefault(marker, deque()).extend(items)

    @property
    def remaining(self) -> int:
        """Replies not yet consumed, over all scripts (0 for a responder)."""
        with self._lock:
            if self._scripts is not None:
                return sum(len(q) for q in self._scripts.values())
            return len(self._script)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the recorded requests, in arrival order (see :class:`RecordedRequest`)."""
        with self._lock:
            return [dataclasses.replace(r) for r in self._requests]

    @property
    def count(self) -> int:
        """How many requests were recorded."""
        with self._lock:
            return len(self._requests)

    def last_messages(self) -> list[dict[str, Any]]:
        """The ``messages`` of the most recent request.

        Raises:
            LookupError: no request was recorded yet.
        """
        with self._lock:
            if not self._requests:
                raise LookupError("ScriptedModel has received no request yet")
            return self._requests[-1].messages

    # ---- request handling --------------------------------------------------------------------

    def _next_from(self, queue: deque[Reply], what: str) -> Reply:
        """Pop the next reply (lock held)."""
        if queue:
            self._consumed += 1
            return queue.popleft()
        if self._default is not None:
            return self._default
        raise _InternalError(
            500,
            f"ScriptedModel: {what} is exhausted after {self._consumed} replies; "
            "add replies or pass default=",
            "script_exhausted",
        )

    async def _choose_reply(self, body: dict[str, Any]) -> Reply:
        if self._responder is not None:
            try:
                result = self._responder(body)
                if inspect.isawaitable(result):
                    result = await result
                return _as_reply(result, "responder result")
            except Exception as exc:  # reported to the client as a 500
                raise _InternalError(
                    500,
                    f"ScriptedModel responder raised {type(exc).__name__}: {exc}",
                    "responder_error",
                ) from exc
        with self._lock:
            if self._scripts is None:
                return self._next_from(self._script, "the script")
            first_user = next(
                (
                    m
                    for m in body.get("messages") or []
                    if isinstance(m, dict) and m.get("role") == "user"
                ),
                None,
            )
            user_text = _text_of(first_user.get("content")) if first_user else ""
            matches = [marker for marker in self._scripts if marker in user_text]
            if len(matches) > 1:
                raise _InternalError(
                    500,
                    f"ScriptedModel: first user message matches several markers {matches!r}",
                    "ambiguous_conversation_marker",
                )
            if not matches:
                if self._default is not None:
                    return self._default
                raise _InternalError(
                    500,
                    "ScriptedModel: no script marker in the first user message "
                    f"(markers: {list(self._scripts)!r})",
                    "no_script_for_conversation",
                )
            return self._next_from(self._scripts[matches[0]], f"the script for {matches[0]!r}")

    def _render(self, reply: Reply, body: dict[str, Any]) -> web.Response:
        """The non-streamed response of ``reply``."""
        return self._respond(reply, body, None)  # type: ignore[return-value]

    def _respond(
        self, reply: Reply, body: dict[str, Any], request: web.Request | None
    ) -> web.Response | Awaitable[web.StreamResponse]:
        headers = dict(reply.headers)
        with self._lock:
            self._completion_counter += 1
            n = self._completion_counter
        headers.setdefault("x-request-id", f"req_scripted_{n}")
        if reply.kind == "garbage":
            return web.Response(
                status=reply.status,
                text=str(reply.body),
                content_type=reply.content_type,
                headers=headers,
            )
        if reply.kind == "error":
            if isinstance(reply.body, str):
                return web.Response(
                    status=reply.status, text=reply.body, content_type="text/plain", headers=headers
                )
            payload = reply.body
            if payload is None:
                payload = _error_body(reply.status, f"ScriptedModel scripted error {reply.status}")
            return web.json_response(payload, status=reply.status, headers=headers)

        calls = []
        with self._lock:
            for call in reply.tool_calls:
                call_id = call.id
                if call_id is None:
                    self._call_counter += 1
                    call_id = f"call_{self._call_counter}"
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                )
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
        if calls:
            message["tool_calls"] = calls
        finish = reply.finish_reason or ("tool_calls" if calls else "stop")
        prompt_tokens = _approx_tokens(sum(_message_chars(m) for m in body.get("messages") or []))
        completion_tokens = _approx_tokens(_message_chars(message))
        payload = {
            "id": f"chatcmpl-scripted-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "system_fingerprint": None,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        if request is not None and body.get("stream"):
            options = body.get("stream_options") or {}
            chunks = completion_chunks(
                payload, self.chunk_chars, self.stream_usage and bool(options.get("include_usage"))
            )
            delay = self.chunk_delay if reply.chunk_delay is None else reply.chunk_delay
            return write_event_stream(request, chunks, delay, headers)
        return web.json_response(payload, status=reply.status, headers=headers)

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        received_at = time.monotonic()
        try:
            body = json.loads(await request.read())
        except ValueError as exc:
            return web.json_response(
                _error_body(400, f"request body is not valid JSON: {exc}"), status=400
            )
        if not isinstance(body, dict):
            return web.json_response(
                _error_body(400, "request body must be a JSON object"), status=400
            )
        with self._lock:
            record = RecordedRequest(
                index=len(self._requests),
                body=body,
                headers={k.lower(): v for k, v in request.headers.items()},
                received_at=received_at,
            )
            self._requests.append(record)

        reply: Reply | None = None
        try:
            reply = await self._choose_reply(body)
            wait = self._latency + reply.delay
            if wait > 0:
                await asyncio.sleep(wait)
            rendered = self._respond(reply, body, request)
            response = await rendered if inspect.isawaitable(rendered) else rendered
        except _InternalError as exc:
            response = web.json_response(
                _error_body(exc.status, str(exc), exc.code, exc.param), status=exc.status
            )
        with self._lock:
            record.replied_at = time.monotonic()
            record.status = response.status
            record.reply = reply
        return response

    async def _handle_models(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": self.model, "object": "model", "created": 0, "owned_by": "scripted"}
                ],
            }
        )


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def _stand_alone(
    host: str = typer.Option("127.0.0.1", help="interface to bind"),
    port: int = typer.Option(8111, help="TCP port, 0 for any free one"),
    latency: float = typer.Option(0.0, help="seconds before each answer"),
    model: str = typer.Option("scripted", help="model id to report"),
    tool: str | None = typer.Option(
        None, help="tool to call once per conversation before answering"
    ),
    arguments: str = typer.Option("{}", help="the tool call's arguments, JSON"),
    answer: str = typer.Option("done", help="the final text answer"),
) -> None:
    """A scripted OpenAI-compatible chat-completions server for manual tries."""
    responder = call_tool_then_answer(tool, arguments, answer) if tool else _always(text(answer))
    server = ScriptedModel(responder=responder, latency=latency, model=model, host=host, port=port)
    try:
        server.start()
    except RuntimeError as exc:
        print(f"error: {exc}")
        raise typer.Exit(1) from None
    print(
        f"ScriptedModel serving model {model!r} at {server.base_url} (Ctrl-C to stop)", flush=True
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print(f"stopped after {server.count} requests", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Serve a simple responder until interrupted (Ctrl-C); returns the exit status.

    Without ``--tool`` every request is answered with ``--answer``; with it each conversation
    calls that tool once (arguments from ``--arguments``) and then answers. Options are parsed
    by typer (``--help`` lists them); a usage error returns 2.
    """
    return run_command(_stand_alone, argv, "python -m workers.testing.scripted_model")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
