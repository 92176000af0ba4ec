"""Activity ``model.complete``: one chat-completions call to any OpenAI-compatible endpoint.

Temporal owns retries: the ``openai`` client is built with ``max_retries=0`` and every failure is
classified by :func:`classify_error` into an ``ApplicationError`` that Temporal retries or not.
The activity heartbeats while it waits, so a dead worker is noticed within the heartbeat timeout,
and it honours cancellation (an interrupt cancels the in-flight HTTP request).

A step someone watches (``CallModelInput.stream``, or a subscriber of the run on this worker's
live channel, :data:`activities.live.BROKER`) is streamed (``stream=True``, usage requested
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
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import structlog
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from temporalio import activity
from temporalio.exceptions import ApplicationError

import activities.model_parts as parts
from activities import metrics
from activities.contracts import (
    ERR_MODEL_OUTPUT_INVALID,
    MODEL_COMPLETE,
    CallModelInput,
    MemoryRef,
    ModelReply,
    StepToolCall,
    ToolOutcome,
    fill_tool_messages,
)
from activities.heartbeat import await_with_heartbeats
from activities.judge import POLICY_JUDGE, JudgeInput, JudgeVerdict, ask_judge
from activities.live import BROKER
from activities.model_attempts import (
    COUNT_KEY,
    Returned,
    as_application_error,
    failures_so_far,
    final,
    used_up,
)
from activities.model_errors import classify_error
from activities.model_limits import (
    DEFAULT_IDLE_SECONDS,
    DEFAULT_MAX_REPLY_BYTES,
    ReplyStalled,
    attempt_seconds,
    http_client,
    until_idle,
)
from activities.model_pace import DEFAULT_WINDOW_TOKENS, Pace, speed_of
from activities.model_reply import check_tool_calls
from activities.streaming import (
    DeltaPublisher,
    ReplyAssembler,
    ReplyCutOff,
    hand_live,
    publish_events,
)

__all__ = ["ModelActivities", "classify_error"]

log = structlog.get_logger("activities.model")


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
        self._pace = Pace()
        self._returned = Returned()
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

    @activity.defn(name=POLICY_JUDGE)
    async def policy_judge(self, req: JudgeInput) -> JudgeVerdict:
        """The judge's verdict on one call (:func:`activities.judge.ask_judge`).

        Raises:
            openai.APIError: the endpoint failed; the workflow escalates the call to a person.
        """
        return await ask_judge(self._client, req)

    @activity.defn(name=MODEL_COMPLETE)
    async def model_complete(self, req: CallModelInput) -> ModelReply:
        """Call the model once; returns a :class:`ModelReply`.

        Raises:
            ApplicationError: classified by :func:`classify_error`.
        """
        info = activity.info()
        attempt = info.attempt
        step = (info.workflow_run_id or "", info.activity_id)
        failures = self._failures(info, req, step)
        beat = {COUNT_KEY: failures}  # every heartbeat carries the count (model_attempts.py)
        outcomes, published = await self._held_calls(req, beat)
        if outcomes and (parts.over_room(req) or _blocked(outcomes)):
            return ModelReply(
                model=req.model,
                tool_outcomes=outcomes,
                tool_events_published=published,
                model_skipped=True,
            )
        kwargs = parts.request_kwargs(
            req, parts.previous_error_type(info) == ERR_MODEL_OUTPUT_INVALID
        )
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
            # watched here (the live channel); text an output guardrail checks goes out whole
            live = req.stream or (req.guardrails is None and BROKER.watched(req.run_id))
            async with DeltaPublisher(req.turn, live=live) as publisher:
                reply = await self._exchange(kwargs, req, publisher, beat, live)
            reply.streamed_chars = publisher.streamed
        except asyncio.CancelledError:
            bound.info("model_step_cancelled")
            metrics.model_step_failed(req.tenant_id, req.model, cancelled=True)
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is classified for Temporal
            metrics.model_step_failed(req.tenant_id, req.model)
            held = (outcomes, published)
            raise self._failed(exc, req, failures, held, bound, started) from None
        reply.latency_ms = round((time.perf_counter() - started) * 1000, 2)
        reply.memory = memory
        reply.tool_outcomes, reply.tool_events_published = outcomes, published
        reply.temperature = kwargs["temperature"]
        parts.settle_reply(reply, req)
        await _check_output(reply, req)
        parts.log_step(bound, reply, publisher.batches)
        metrics.model_step(req.tenant_id, req.model, reply.usage, reply.latency_ms)
        if parts.may_be_too_large(reply):  # recording it may fail after this returns
            self._returned.note(step)
        return reply

    def _failed(
        self,
        exc: Exception,
        req: CallModelInput,
        failures: int,
        held: tuple[list[ToolOutcome], bool],
        bound: Any,
        started: float,
    ) -> ApplicationError:
        """The error an attempt that failed with ``exc`` raises, counted, logged and heartbeated.

        ``held``: the outcomes of the step's held calls and whether their events were published
        (kept in the error's details, :func:`activities.model_parts.with_outcomes`).
        """
        err = final(
            classify_error(exc, failures + 1, self._max_invalid), failures + 1, req.max_attempts
        )
        if held[0]:  # the calls ran: their results are kept though the model failed
            err = parts.with_outcomes(err, *held)
        bound.warning(
            "model_step_failed",
            latency_ms=round((time.perf_counter() - started) * 1000, 2),
            error=str(err),
            error_type=err.type,
            retryable=not err.non_retryable,
        )
        # the next attempt names this error in its model_retry event (activities.streaming)
        activity.heartbeat({"error": str(err), "error_type": err.type, COUNT_KEY: failures + 1})
        return err

    def _failures(self, info: activity.Info, req: CallModelInput, step: tuple[str, str]) -> int:
        """The model's failures in this step's earlier attempts (activities/model_attempts.py).

        Raises:
            ApplicationError: non-retryable ``PayloadsTooLarge`` when this worker saw the step's
                replies fail to be recorded as many times as the step allows.
        """
        failures = failures_so_far(
            info.attempt, info.heartbeat_details, req.max_attempts is not None
        )
        returned = self._returned.count(step)  # large replies that could not be recorded
        if returned > failures:
            failures = returned
            if (done := used_up(failures, req.max_attempts)) is not None:
                raise done
        return failures

    async def _held_calls(
        self, req: CallModelInput, beat: dict[str, Any]
    ) -> tuple[list[ToolOutcome], bool]:
        """:meth:`_tools_first` when the step carries calls; a failure there counts as the step's.

        Raises:
            ApplicationError: what :meth:`_tools_first` raised (or it as one), non-retryable
                when it reaches the step's limit.
        """
        if not req.tools_first:
            return [], False
        failures = beat[COUNT_KEY]
        try:
            return await self._tools_first(req, beat)
        except Exception as exc:  # noqa: BLE001 - an attempt that ends here is counted too
            err = exc if isinstance(exc, ApplicationError) else as_application_error(exc)
            activity.heartbeat({"error": str(err), COUNT_KEY: failures + 1})
            raise final(err, failures + 1, req.max_attempts) from None

    async def _tools_first(
        self, req: CallModelInput, beat: dict[str, Any]
    ) -> tuple[list[ToolOutcome], bool]:
        """Run ``req.tools_first``; their results go into ``req.messages`` and the live stream.

        Their ``tool_finished`` events are published to the stream for a run watched by stream
        polls (``req.stream``), else handed to this worker's live channel when someone reads the
        run there (:func:`activities.streaming.hand_live`; the workflow emits them again and the
        reader gives them once). Returns the outcomes, in call order, and whether the events were
        published (then the workflow does not emit them).

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
        outcomes = await await_with_heartbeats(
            self._tools(req.tools_first), lambda ms: {"waiting_ms": ms, **beat}
        )
        req.messages = fill_tool_messages(req.messages, {o.call_id: o.content for o in outcomes})
        events = [
            parts.finished_event(f, o) for f, o in zip(req.tools_first, outcomes, strict=True)
        ]
        published = req.stream and await publish_events(events)
        if not published:
            hand_live(req.run_id, events)  # when watched on this worker's live channel
        return outcomes, published

    async def _exchange(
        self,
        kwargs: dict[str, Any],
        req: CallModelInput,
        publisher: DeltaPublisher,
        beat: dict[str, Any],
        live: bool,
    ) -> ModelReply:
        """The HTTP exchange of one attempt, streamed (``live``) or not, heartbeating ``beat``.

        The exchange ends within :func:`activities.model_limits.attempt_seconds` (the backstop) or,
        sooner, the limit the server's measured speed sizes (:mod:`activities.model_pace`); the
        speed the reply reports is kept for the next attempts.

        Raises:
            ReplyStalled: it did not end within either limit.
            ValueError: the reply has more than ``MAX_TOOL_CALLS`` tool calls
                (:func:`activities.model_reply.check_tool_calls`).
            Exception: what :meth:`_stream` or :meth:`_plain` raise.
        """
        timings: list[object] = []
        work = (
            self._stream(kwargs, req, publisher, timings)
            if live
            else self._plain(kwargs, req, timings)
        )
        seconds = attempt_seconds(activity.info())
        why = "the attempt's start-to-close timeout, less a margin"
        window = req.context_window or DEFAULT_WINDOW_TOKENS
        paced = self._pace.limit(req.model, window, req.settings.max_tokens or 1024)
        if paced is not None and (seconds is None or paced[0] < seconds):
            seconds, why = round(paced[0], 1), f"sized from the server's speed: {paced[1]}"
        deadline = asyncio.timeout(seconds)
        try:
            async with deadline:
                reply = await await_with_heartbeats(work, lambda ms: {"waiting_ms": ms, **beat})
        except TimeoutError:
            if not deadline.expired():
                raise
            raise ReplyStalled(
                f"the model server did not finish its reply within {seconds:g} s ({why})"
            ) from None
        self._pace.observe(req.model, speed_of(timings[-1] if timings else None))
        check_tool_calls(len(reply.tool_calls))
        return reply

    async def _plain(
        self, kwargs: dict[str, Any], req: CallModelInput, timings: list[object]
    ) -> ModelReply:
        """One chat completion, not streamed (a step nobody watches); its ``timings`` to ``timings``.

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
        timings.append(parts.timings_of(completion))
        return parts.normalise(completion, req.model)

    async def _stream(
        self,
        kwargs: dict[str, Any],
        req: CallModelInput,
        publisher: DeltaPublisher,
        timings: list[object],
    ) -> ModelReply:
        """One streamed chat completion, assembled (see :mod:`activities.streaming`).

        The ``timings`` of chunks that carry them (llama.cpp's last one) go to ``timings``.

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
                found = parts.timings_of(chunk)
                if found is not None:
                    timings.append(found)
        return assembler.reply(req.messages)


def _blocked(outcomes: list[ToolOutcome]) -> bool:
    """Whether a held call's result tripped a ``block`` guardrail: the model is not asked with it."""
    return any(t.action == "block" for o in outcomes for t in o.guardrails)


async def _check_output(reply: ModelReply, req: CallModelInput) -> None:
    """The reply's text through the spec's ``output`` guardrails, before it leaves the activity.

    A ``block`` withholds the text and drops the reply's tool calls (the model's output is not
    acted on); ``ModelReply.guardrails`` records what tripped (docs/guardrails.md).
    """
    if req.guardrails is None or not req.guardrails.entries or not reply.content:
        return
    from activities.guardrails import GuardrailContext, check

    ctx = GuardrailContext(
        stage="output", run_id=req.run_id, turn=req.turn, tenant_id=req.tenant_id
    )
    reply.content, reply.guardrails = await check(reply.content, req.guardrails, ctx)
    for trip in reply.guardrails:
        trip.turn = req.turn
    if any(t.action == "block" for t in reply.guardrails):
        reply.tool_calls = []
    if reply.guardrails:
        log.info(
            "guardrail_tripped",
            run_id=req.run_id,
            turn=req.turn,
            stage="output",
            guardrails=[(t.guardrail, t.action) for t in reply.guardrails],
        )
