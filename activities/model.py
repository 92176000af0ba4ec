"""Activity ``model.complete``: one chat-completions call to any OpenAI-compatible endpoint.

Temporal owns retries: the ``openai`` client is built with ``max_retries=0`` and every failure is
classified by :func:`classify_error` into an ``ApplicationError`` that Temporal retries or not.
The activity heartbeats while it waits, so a dead worker is noticed within the heartbeat timeout,
and it honours cancellation (an interrupt cancels the in-flight HTTP request).

A step someone watches (``CallModelInput.stream``) is streamed (``stream=True``, usage requested
with ``stream_options``) and assembled by :class:`activities.streaming.ReplyAssembler`; while the
run is watched, the text is published to the run's event stream as it arrives
(:class:`activities.streaming.DeltaPublisher`), and ``ModelReply.streamed_chars`` tells the
workflow how much of it was. A step nobody watches is one plain request: streaming cost a quarter
of the model activity's CPU (py-spy, ``make bench`` scenario ``cpu``) for text nobody reads.

Requests go through the client's ``post`` with the body as built here: ``create`` first walks
every message through the SDK's type-directed transform (about 5% of a worker's CPU in the same
profile), which leaves plain JSON messages as they are.

A server's reply is bounded (:mod:`activities.model_limits`): its bytes, the silence between two
streamed chunks, the attempt's wall time; and at most :data:`activities.model_reply.MAX_TOOL_CALLS`
tool calls are taken from one reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import openai
import structlog
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import metrics
from activities.contracts import (
    ERR_MODEL_OUTPUT_INVALID,
    MODEL_COMPLETE,
    CallModelInput,
    MemoryRef,
    ModelReply,
    StepToolCall,
    ToolCallRequest,
    ToolOutcome,
    Usage,
    fill_tool_messages,
)
from activities.heartbeat import await_with_heartbeats
from activities.mcp.config import canonical_tool_name
from activities.model_errors import classify_error
from activities.model_limits import (
    DEFAULT_IDLE_SECONDS,
    DEFAULT_MAX_REPLY_BYTES,
    ReplyStalled,
    attempt_seconds,
    http_client,
    until_idle,
)
from activities.model_reply import check_tool_calls, token_count, without_lone_surrogates
from activities.streaming import DeltaPublisher, ReplyAssembler, ReplyCutOff, publish_events

__all__ = ["ModelActivities", "classify_error"]

log = structlog.get_logger("activities.model")


def _normalise(completion: Any, requested_model: str) -> ModelReply:
    """Turn a ``ChatCompletion`` into a :class:`ModelReply`; raise ValueError on a malformed one."""
    choices = getattr(completion, "choices", None)
    if not choices:
        raise ValueError(f"reply has no choices: {str(completion)[:200]!r}")
    if not choices[0].finish_reason:
        raise ReplyCutOff("the reply has no finish_reason: it was cut off")
    msg = choices[0].message
    calls: list[ToolCallRequest] = []
    for i, tc in enumerate(msg.tool_calls or []):
        fn = tc.function
        arguments = without_lone_surrogates(fn.arguments or "{}")
        calls.append(ToolCallRequest(id=tc.id or f"call_{i}", name=fn.name, arguments=arguments))
    u = completion.usage
    usage = Usage(
        prompt_tokens=token_count(getattr(u, "prompt_tokens", 0)),
        completion_tokens=token_count(getattr(u, "completion_tokens", 0)),
        total_tokens=token_count(getattr(u, "total_tokens", 0)),
    )
    return ModelReply(
        content=msg.content,
        tool_calls=calls,
        usage=usage,
        finish_reason=choices[0].finish_reason,
        model=getattr(completion, "model", None) or requested_model,
    )


def _request_kwargs(req: CallModelInput, after_invalid_output: bool = False) -> dict[str, Any]:
    """The ``chat.completions.create`` arguments for ``req``.

    A retry sends the same request. Only when the previous attempt failed on output that could
    not be read (``after_invalid_output``) and the spec sets ``retry_temperature_step`` is the
    temperature raised by that step (capped at 1.0): a retry of the same prompt at the same
    temperature tends to repeat an unparsable output. A rate limit, a 5xx, a cut-off stream or a
    worker crash never changes the request.
    """
    temperature = req.settings.temperature
    if after_invalid_output and req.settings.retry_temperature_step > 0:
        temperature = min(1.0, temperature + req.settings.retry_temperature_step)
    kwargs: dict[str, Any] = {
        "model": req.model,
        "messages": req.messages,
        "temperature": temperature,
    }
    if req.settings.max_tokens:
        kwargs["max_tokens"] = req.settings.max_tokens
    if req.settings.top_p is not None:
        kwargs["top_p"] = req.settings.top_p
    if req.tools:
        kwargs["tools"] = req.tools
    return kwargs


def _settle_reply(reply: ModelReply, req: CallModelInput) -> None:
    """Canonicalise the reply's tool names against those offered and price its usage (USD)."""
    offered = {t.get("function", {}).get("name") for t in req.tools}
    for call in reply.tool_calls:  # MCP tools may be called `server.tool`: `server__tool`
        call.name = canonical_tool_name(call.name, offered)
    reply.usage.cost_usd = round(
        reply.usage.prompt_tokens * req.prompt_price_per_mtok / 1e6
        + reply.usage.completion_tokens * req.completion_price_per_mtok / 1e6,
        8,
    )


def _log_step(bound: Any, reply: ModelReply, batches: int) -> None:
    """The ``model_step`` log event of a step that answered (tokens, cost, calls, streaming)."""
    bound.info(
        "model_step",
        latency_ms=reply.latency_ms,
        prompt_tokens=reply.usage.prompt_tokens,
        completion_tokens=reply.usage.completion_tokens,
        total_tokens=reply.usage.total_tokens,
        cost_usd=reply.usage.cost_usd,
        tool_calls=[c.name for c in reply.tool_calls],
        streamed_chars=reply.streamed_chars,
        stream_batches=batches,
    )


def _finished_event(first: StepToolCall, out: ToolOutcome) -> dict[str, Any]:
    """The ``tool_finished`` event of a ``tools_first`` call, as the workflow would emit it."""
    call = first.call
    arguments: Any = out.arguments
    if arguments is None:
        arguments = call.arguments
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
    status = out.status if out.failure is None else ("timed_out" if out.timed_out else "error")
    return {
        "type": "tool_finished",
        "turn": call.turn,
        "tool_call_id": call.call_id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
        "duration_ms": out.duration_ms if out.failure is None else None,
        "result": out.content,
    }


def _with_outcomes(
    err: ApplicationError, outcomes: list[ToolOutcome], published: bool
) -> ApplicationError:
    """``err`` with one more detail: the ``tools_first`` results and whether they were published.

    The detail is ``{"tool_outcomes": [...], "published": bool}``. The workflow records them
    from the step's failure (workflows/tools_first.py), so a model that fails for good loses
    none of the calls that ran before it.
    """
    return ApplicationError(
        err.message,
        *err.details,
        {"tool_outcomes": [o.model_dump(mode="json") for o in outcomes], "published": published},
        type=err.type,
        non_retryable=err.non_retryable,
        next_retry_delay=err.next_retry_delay,
    )


def _over_room(req: CallModelInput) -> bool:
    """Whether the messages after ``req.counted_messages`` may be over ``req.token_room`` tokens.

    The bound is the workflow's own (``workflows.compaction.token_upper_bound``), so the workflow
    would count, and maybe compact, before it asked the model.
    """
    if req.token_room is None:
        return False
    from workflows.compaction import token_upper_bound

    return sum(token_upper_bound(m) for m in req.messages[req.counted_messages :]) > req.token_room


def _previous_error_type(info: activity.Info) -> str | None:
    """The error type the previous attempt heartbeated before it failed (None on attempt 1)."""
    if info.attempt <= 1:
        return None
    for detail in info.heartbeat_details or ():
        fields = cast("dict[str, Any]", detail) if isinstance(detail, dict) else None
        if fields is not None and fields.get("error_type"):
            return str(fields["error_type"])
    return None


class ModelActivities:
    """Holds the OpenAI-compatible client of one worker; ``model_complete`` is the activity.

    Args:
        base_url: the endpoint, e.g. ``http://127.0.0.1:8110/v1`` (``OPENAI_BASE_URL``).
        api_key: its key (``OPENAI_API_KEY``); never logged.
        max_invalid_attempts: attempts before an unparsable model output becomes non-retryable.
        memory_url: the memory store (``AGENT_MEMORY_URL``); None: no retrieval.
        tools: runs a step's ``tools_first`` calls (``RuntimeActivities.run_first``); the
            workflow sends such calls only to steps on its own task queue, whose workers have it.
        idle_seconds: seconds a streamed reply may go without a chunk after its first
            (``AGENT_MODEL_IDLE_TIMEOUT``, default 60; 0: no limit).
        max_reply_bytes: bytes of one response body at most, as received
            (``AGENT_MODEL_MAX_REPLY_BYTES``, default 32 MiB).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        max_invalid_attempts: int = 3,
        memory_url: str | None = None,
        tools: Callable[[list[StepToolCall]], Awaitable[list[ToolOutcome]]] | None = None,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key,
            max_retries=0,
            timeout=600,
            http_client=http_client(max_reply_bytes),
        )
        self._idle = idle_seconds
        self._max_invalid = max_invalid_attempts
        self._memory_url = memory_url
        self._tools = tools

    async def _with_memory(self, req: CallModelInput, kwargs: dict[str, Any]) -> list[MemoryRef]:
        """Retrieve the step's memory into ``kwargs["messages"]``; the items given."""
        if req.memory is None or not self._memory_url:
            return []
        from activities.memory import open_store
        from activities.memory.retrieval import retrieve

        store = await asyncio.to_thread(open_store, self._memory_url)
        refs, messages = await asyncio.to_thread(retrieve, store, req.memory, req.messages)
        kwargs["messages"] = messages
        return refs

    @activity.defn(name=MODEL_COMPLETE)
    async def model_complete(self, req: CallModelInput) -> ModelReply:
        """Call the model once; returns a :class:`ModelReply`.

        Raises:
            ApplicationError: classified by :func:`classify_error`.
        """
        info = activity.info()
        attempt = info.attempt
        outcomes, published = await self._tools_first(req) if req.tools_first else ([], False)
        if outcomes and _over_room(req):
            return ModelReply(
                model=req.model,
                tool_outcomes=outcomes,
                tool_events_published=published,
                model_skipped=True,
            )
        kwargs = _request_kwargs(req, _previous_error_type(info) == ERR_MODEL_OUTPUT_INVALID)
        bound = log.bind(
            run_id=req.run_id,
            turn=req.turn,
            tenant_id=req.tenant_id,
            attempt=attempt,
            model=req.model,
        )
        started = time.perf_counter()
        try:
            memory = await self._with_memory(req, kwargs)
            async with DeltaPublisher(req.turn, live=req.stream) as publisher:
                reply = await self._exchange(kwargs, req, publisher)
            reply.streamed_chars = publisher.streamed
        except asyncio.CancelledError:
            bound.info("model_step_cancelled")
            metrics.model_step_failed(req.tenant_id, req.model, cancelled=True)
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is classified for Temporal
            err = classify_error(exc, attempt, self._max_invalid)
            metrics.model_step_failed(req.tenant_id, req.model)
            if outcomes:  # the calls ran: their results are kept though the model failed
                err = _with_outcomes(err, outcomes, published)
            bound.warning(
                "model_step_failed",
                latency_ms=round((time.perf_counter() - started) * 1000, 2),
                error=str(err),
                error_type=err.type,
                retryable=not err.non_retryable,
            )
            # the next attempt names this error in its model_retry event (activities.streaming)
            activity.heartbeat({"error": str(err), "error_type": err.type})
            raise err from None
        reply.latency_ms = round((time.perf_counter() - started) * 1000, 2)
        reply.memory = memory
        reply.tool_outcomes, reply.tool_events_published = outcomes, published
        reply.temperature = kwargs["temperature"]
        _settle_reply(reply, req)
        _log_step(bound, reply, publisher.batches)
        metrics.model_step(req.tenant_id, req.model, reply.usage, reply.latency_ms)
        return reply

    async def _tools_first(self, req: CallModelInput) -> tuple[list[ToolOutcome], bool]:
        """Run ``req.tools_first``; their results go into ``req.messages`` and the live stream.

        Their ``tool_finished`` events are published only for a watched run (``req.stream``).
        Returns the outcomes, in call order, and whether the events were published.

        Raises:
            ApplicationError: non-retryable ``ToolsUnavailable`` on a worker built without
                ``tools`` (a model queue's worker: the workflow never sends calls there).
        """
        if self._tools is None:
            raise ApplicationError(
                "this worker runs no tools; tools_first goes only to the run's own task queue",
                type="ToolsUnavailable",
                non_retryable=True,
            )
        outcomes = await await_with_heartbeats(self._tools(req.tools_first))
        req.messages = fill_tool_messages(req.messages, {o.call_id: o.content for o in outcomes})
        published = req.stream and await publish_events(
            [_finished_event(f, o) for f, o in zip(req.tools_first, outcomes, strict=True)]
        )
        return outcomes, published

    async def _exchange(
        self, kwargs: dict[str, Any], req: CallModelInput, publisher: DeltaPublisher
    ) -> ModelReply:
        """The HTTP exchange of one attempt, streamed or not, heartbeating while it waits.

        Raises:
            ReplyStalled: it did not end within :func:`activities.model_limits.attempt_seconds`.
            ValueError: the reply has more than ``MAX_TOOL_CALLS`` tool calls
                (:func:`activities.model_reply.check_tool_calls`).
            Exception: what :meth:`_stream` or :meth:`_plain` raise.
        """
        work = self._stream(kwargs, req, publisher) if req.stream else self._plain(kwargs, req)
        seconds = attempt_seconds(activity.info())
        deadline = asyncio.timeout(seconds)
        try:
            async with deadline:
                reply = await await_with_heartbeats(work)
        except TimeoutError:
            if not deadline.expired():
                raise
            raise ReplyStalled(
                f"the model server did not finish its reply within {seconds:g} s "
                "(the attempt's start-to-close timeout, less a margin)"
            ) from None
        check_tool_calls(len(reply.tool_calls))
        return reply

    async def _plain(self, kwargs: dict[str, Any], req: CallModelInput) -> ModelReply:
        """One chat completion, not streamed (a step nobody watches).

        Raises:
            openai.APIError: from the client (classified by the caller).
            ValueError: the reply has no choices.
            ReplyTooLarge: the body went past ``max_reply_bytes`` (the rest is not read).
        """
        try:
            completion = await self._client.post(
                "/chat/completions", body=kwargs, cast_to=ChatCompletion
            )
        except json.JSONDecodeError as e:
            if e.doc.strip() and (e.msg.startswith("Unterminated") or e.pos >= len(e.doc.rstrip())):
                # a 200 whose body ends before its JSON does: cut off in transit
                raise ReplyCutOff(f"the reply body ends before its JSON does ({e})") from None
            raise  # malformed, not cut: unreadable output
        return _normalise(completion, req.model)

    async def _stream(
        self, kwargs: dict[str, Any], req: CallModelInput, publisher: DeltaPublisher
    ) -> ModelReply:
        """One streamed chat completion, assembled (see :mod:`activities.streaming`).

        Raises:
            openai.APIError: from the client (classified by the caller).
            ValueError: the stream carried no choice.
            ReplyStalled: no chunk for ``idle_seconds`` after the first.
            ReplyTooLarge: the stream went past ``max_reply_bytes``.
        """
        assembler = ReplyAssembler(req.model, publisher.add)
        body = {**kwargs, "stream": True, "stream_options": {"include_usage": True}}
        stream = await self._client.post(
            "/chat/completions",
            body=body,
            cast_to=ChatCompletion,
            stream=True,
            stream_cls=openai.AsyncStream[ChatCompletionChunk],
        )
        async with stream:  # closed however the loop ends: the connection is not left open
            async for chunk in until_idle(stream, self._idle):
                assembler.add(chunk)
        return assembler.reply(req.messages)
