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
import threading
import time
from collections import deque
from collections.abc import Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from workers.testing._loop_thread import LoopThread
from workers.testing._sse import completion_chunks, write_event_stream
from workers.testing.prefix_cache import PrefixCache
from workers.testing.scripted_replies import (
    RecordedRequest,
    Reply,
    Responder,
    ToolCall,
    _as_reply,
    _check_delay,
    _error_body,
    _InternalError,
    call_tool_then_answer,
    completion_payload,
    conversation_marker,
    error,
    garbage,
    text,
    tool_call,
    tool_calls,
)
from workers.testing.scripted_replies import (
    _approx_tokens as _approx_tokens,  # re-exported: tests size prompts with them
)
from workers.testing.scripted_replies import (
    _message_chars as _message_chars,
)

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

# ------------------------------------------------------------------------------ The server


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
        prompt_cache: report cached prompt tokens as a prefix cache would (:class:`PrefixCache`).

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
        prompt_cache: bool = False,
    ) -> None:
        self.chunk_chars = max(1, int(chunk_chars))
        self.chunk_delay = _check_delay(chunk_delay)
        self.stream_usage = stream_usage
        self._prompt_cache = PrefixCache() if prompt_cache else None
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
        self._loop_thread = LoopThread("ScriptedModel")
        self._runner: web.AppRunner | None = None

    # ---- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> ScriptedModel:
        """Start serving in a background thread; returns ``self`` once the port is bound.

        Raises:
            RuntimeError: already running, or the server failed to start within ``timeout``
                seconds (the cause, e.g. ``OSError`` for a port in use, is chained).
        """
        self._loop_thread.start(self._serve, f"ScriptedModel:{self._requested_port}", timeout)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving and join the thread; requests still in flight are cut off.

        Idempotent. The recorded requests are kept; the server may be started again.
        """
        runner = self._runner
        try:
            self._loop_thread.stop(runner.cleanup if runner is not None else None, timeout)
        finally:
            self._runner = None
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
            marker = conversation_marker(self._scripts, body, self._default is not None)
            if marker is None:
                return self._default  # pyright: ignore[reportReturnType] - not None: conversation_marker was told there is a default
            return self._next_from(self._scripts[marker], f"the script for {marker!r}")

    def _render(self, reply: Reply, body: dict[str, Any]) -> web.Response:
        """The non-streamed response of ``reply``."""
        return self._respond(reply, body, None)  # pyright: ignore[reportReturnType] - without a request _respond returns the Response

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
        messages, cache = body.get("messages") or [], self._prompt_cache
        payload = completion_payload(n, self.model, message, finish, messages, cache)
        if request is not None and body.get("stream"):
            options = body.get("stream_options") or {}
            chunks = completion_chunks(
                payload, self.chunk_chars, self.stream_usage and bool(options.get("include_usage"))
            )
            delay = self.chunk_delay if reply.chunk_delay is None else reply.chunk_delay
            return write_event_stream(request, chunks, delay, headers, cut_after=reply.cut_after)
        if reply.cut_after is not None:
            raw = json.dumps(payload).encode()[: reply.cut_after]
            return web.Response(
                status=reply.status, body=raw, content_type="application/json", headers=headers
            )
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


def main(argv: list[str] | None = None) -> int:
    """Serve a simple responder until interrupted (Ctrl-C); returns the exit status.

    Without ``--tool`` every request is answered with ``--answer``; with it each conversation
    calls that tool once (arguments from ``--arguments``) and then answers. Options are parsed
    by typer (``--help`` lists them); a usage error returns 2.
    """
    from workers.testing.scripted_cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
