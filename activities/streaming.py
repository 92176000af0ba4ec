"""Streaming model replies: assemble chat-completion chunks, publish text to the run's stream.

:class:`ReplyAssembler` turns the chunks of ``chat.completions.create(stream=True)`` into a
:class:`~activities.contracts.ModelReply`: text deltas concatenated, tool-call deltas keyed by
their ``index`` (id and name from the first chunk that has them, ``arguments`` concatenated),
usage from the final chunk (``stream_options={"include_usage": true}``) or, when the server sends
none, estimated at 4 characters a token.

:class:`DeltaPublisher` publishes the text of one attempt as ``text_delta`` items. On a worker
that serves its live channel (:data:`activities.live.BROKER`, docs/live-runs.md) they go there
every :data:`LIVE_BATCH_SECONDS`, outside the history (no action, no event), and the workflow's
own ``text_delta`` at the step's end carries the whole reply. On a worker without one they go to
the run's event stream (``workflows.events``) in batches every :data:`BATCH_SECONDS`, but only
while someone watches the run (query ``__agent_events_watched``, asked at most every
:data:`WATCH_CHECK_SECONDS`): each batch is a Signal, i.e. an event in the run's history. A retry
attempt first publishes ``model_retry`` so subscribers drop the earlier attempt's partial text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import structlog
from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from activities import redaction
from activities.contracts import ModelReply, ToolCallRequest, Usage
from activities.live import BROKER
from activities.model_reply import cached_prompt_count, token_count, without_lone_surrogates
from activities.rules import clip

log = structlog.get_logger("activities.streaming")

TOPIC = "events"
"""The event stream's topic (``workflows.events.TOPIC``)."""
WATCHED_QUERY = "__agent_events_watched"
"""The workflow's query telling whether anyone watches (``workflows.events.WATCHED_QUERY``)."""
BATCH_SECONDS = 0.25
"""Interval between two text batches (one Signal each) while watched; chosen by measurement
(README "Live runs": 0.25 s keeps a 30 tokens/s model at ~8 tokens a batch and 4 signals a
second)."""
WATCH_CHECK_SECONDS = 1.0
"""How often the activity asks the workflow whether anyone watches."""
LIVE_BATCH_SECONDS = 0.05
"""Interval between two text batches handed to the worker's live channel (no action, no event:
only the delta latency budget of 250 ms, docs/live-runs.md, sizes it)."""
CHARS_PER_TOKEN = 4
"""Estimate of characters a token when the server reports no usage."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


async def publish_events(items: list[dict[str, Any]]) -> bool:
    """Publish ``items`` (each with ``type`` and ``turn``) to the run's event stream now.

    For events an activity knows before the workflow does: the results of the tool calls a model
    step runs first (``tool_finished``, workflows/model_step.py, ToolsFirst), published before the model is
    asked, so a live view shows them before the step's text. Items are stamped ``at`` and
    clipped as the workflow's own (``activities.rules.clip``), and redacted. Returns whether the
    server took them; a failure is logged and never fails the step.
    """
    if not activity.info().workflow_id:
        return False
    try:
        client = WorkflowStreamClient.from_within_activity(
            batch_interval=timedelta(hours=1), max_retry_duration=timedelta(seconds=30)
        )
        for fields in items:
            client.topic(TOPIC).publish(_stamped(fields))
        await client.flush()
        return True
    except Exception as exc:  # noqa: BLE001 - the stream is best effort; the step is not
        log.warning("stream_publish_failed", error=str(exc))
        return False


def hand_live(run_id: str, items: list[dict[str, Any]]) -> bool:
    """Hand ``items`` (each with ``type`` and ``turn``) to this worker's live channel now.

    For the events of :func:`publish_events` when the run's watchers read the worker's live
    channel (:data:`activities.live.BROKER`) rather than poll its stream: they go out marked
    ``live`` before the model is asked, outside the history (no action, no event); the workflow
    still emits them when it settles the step, and the reader (``workers.live_reader``) gives a
    call's ``tool_finished`` once. Stamped, clipped and redacted as :func:`publish_events`'s.
    Returns False (nothing handed) when nobody watches ``run_id`` on this worker.
    """
    if not BROKER.watched(run_id):
        return False
    for fields in items:
        BROKER.delta(run_id, _stamped(fields))
    return True


def _stamped(fields: dict[str, Any]) -> Any:
    """An activity's event item: ``at`` now, clipped as the workflow's own, and redacted."""
    item = clip({"type": fields["type"], "turn": fields["turn"], "at": _now(), **fields})
    return redaction.current().value(item)


class ReplyCutOff(Exception):
    """A reply that ended before the model finished it (no ``finish_reason``): cut off in transit.

    Classified by :func:`activities.model.classify_error` as ``ModelUnavailable`` (retryable with
    the same request). Seen with proxies and providers that drop a stream silently (issue #19).
    """


class ReplyAssembler:
    """Accumulates streamed chunks; :meth:`reply` returns the whole :class:`ModelReply`.

    Args:
        requested_model: the model asked for (used when chunks name none).
        on_text: called with each text delta, in order.
    """

    def __init__(self, requested_model: str, on_text: Callable[[str], None]) -> None:
        self._model = requested_model
        self._on_text = on_text
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._usage_seen: Any = None
        self._timings: object = None
        self._choices_seen = False

    def add(self, chunk: Any) -> None:
        """Take one ``ChatCompletionChunk`` (text, tool-call deltas, finish reason, usage)."""
        if getattr(chunk, "model", None):
            self._model = chunk.model
        extra: object = getattr(chunk, "model_extra", None)
        if isinstance(extra, dict):
            found = cast("dict[str, Any]", extra).get("timings")
            if found is not None:
                self._timings = found
        u = getattr(chunk, "usage", None)
        if u is not None:
            self._usage_seen = u
            prompt = token_count(u.prompt_tokens)
            self._usage = Usage(
                prompt_tokens=prompt,
                completion_tokens=token_count(u.completion_tokens),
                total_tokens=token_count(u.total_tokens),
            )
        choices: list[Any] = chunk.choices or []
        for choice in choices:
            if choice.index not in (0, None):
                continue
            self._choices_seen = True
            delta = choice.delta
            if delta is not None and delta.content:
                self._text.append(delta.content)
                self._on_text(delta.content)
            calls: list[Any] = (delta.tool_calls if delta is not None else None) or []
            for tc in calls:
                self._add_call(tc)
            if choice.finish_reason:
                self._finish = choice.finish_reason

    def _add_call(self, tc: Any) -> None:
        index = tc.index if tc.index is not None else len(self._calls)
        slot = self._calls.setdefault(index, {"id": None, "name": "", "arguments": []})
        if tc.id:
            slot["id"] = tc.id
        fn = tc.function
        if fn is None:
            return
        if fn.name and fn.name != slot["name"]:
            slot["name"] += fn.name
        if fn.arguments:
            slot["arguments"].append(fn.arguments)

    @property
    def text(self) -> str:
        """The text received so far."""
        return "".join(self._text)

    def reply(self, messages: list[dict[str, Any]]) -> ModelReply:
        """The assembled reply.

        Args:
            messages: the request's messages (for the usage estimate when the server sent none).

        Raises:
            ValueError: the stream carried no choice at all (classified as unreadable output).
            ReplyCutOff: the stream ended before a choice said how it finished (no
                ``finish_reason``): a connection a proxy or the provider dropped. The step is
                retried with the same request, never taken as the answer.
        """
        if not self._choices_seen:
            raise ValueError("the streamed reply had no choices")
        if self._finish is None:
            raise ReplyCutOff(
                f"the streamed reply ended without a finish_reason after {len(self.text)} "
                f"characters and {len(self._calls)} tool call(s): the stream was cut off"
            )
        calls = [
            ToolCallRequest(
                id=slot["id"] or f"call_{i}",
                name=slot["name"],
                arguments=without_lone_surrogates("".join(slot["arguments"]) or "{}"),
            )
            for i, (_, slot) in enumerate(sorted(self._calls.items()))
        ]
        content = self.text or None
        usage = self._usage or self._estimate_usage(messages, content, calls)
        if self._usage is not None:  # llama.cpp sends its timings in the last chunk, maybe after
            usage.cached_prompt_tokens = cached_prompt_count(
                self._usage_seen, self._timings, usage.prompt_tokens
            )
        return ModelReply(
            content=content,
            tool_calls=calls,
            usage=usage,
            finish_reason=self._finish,
            model=self._model,
        )

    @staticmethod
    def _estimate_usage(
        messages: list[dict[str, Any]], content: str | None, calls: list[ToolCallRequest]
    ) -> Usage:
        prompt = len(json.dumps(messages)) // CHARS_PER_TOKEN
        out_chars = len(content or "") + sum(len(c.name) + len(c.arguments) for c in calls)
        completion = max(1, out_chars // CHARS_PER_TOKEN)
        log.info("usage_estimated", prompt_tokens=prompt, completion_tokens=completion)
        return Usage(
            prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
        )


class DeltaPublisher:
    """Publishes one model attempt's text to the worker's live channel, or to the run's stream.

    With the live channel (:attr:`activities.live.LiveBroker.serving`), every
    :data:`LIVE_BATCH_SECONDS` a ``text_delta`` with ``pos`` (characters before it) and
    ``attempt``; :attr:`streamed` stays 0 (nothing of it is in the run's stream). Without it, as
    follows.

    Use as ``async with DeltaPublisher(turn) as pub:``, feed :meth:`add`, and read
    :attr:`streamed` after the block: the characters of the redacted reply text published
    (confirmed by the server). Text is redacted before it leaves (:class:`activities.redaction.PieceRedactor`: a secret
    split between two batches is held back until it is whole, then sent as ``[REDACTED]``). Stream
    failures are logged and stop publishing; they never fail the model step.

    Args:
        turn: the turn of the model step (each item's ``turn``).
        batch_seconds: interval between batches (None: :data:`BATCH_SECONDS`).
        watch_seconds: interval between two "is anyone watching" queries (None:
            :data:`WATCH_CHECK_SECONDS`).
        live: False for a step that is not streamed (``CallModelInput.stream``): nothing is
            batched, only a retried attempt's ``model_retry`` notice is published.
    """

    def __init__(
        self,
        turn: int,
        batch_seconds: float | None = None,
        watch_seconds: float | None = None,
        live: bool = True,
    ) -> None:
        self._turn = turn
        self._live = live
        self._channel = BROKER.serving  # the worker's live channel: deltas stay out of history
        default = LIVE_BATCH_SECONDS if self._channel else BATCH_SECONDS
        self._batch = default if batch_seconds is None else batch_seconds
        self._watch_every = WATCH_CHECK_SECONDS if watch_seconds is None else watch_seconds
        self._text: redaction.PieceRedactor | None = None
        self._dirty = False
        self.streamed = 0
        self.batches = 0
        self._watched = False
        self._checked_at = -1e9
        self._broken = False
        self._client: WorkflowStreamClient | None = None
        self._run_id = ""
        self._attempt = 1
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def __aenter__(self) -> DeltaPublisher:
        info = activity.info()
        if not info.workflow_id or (not self._live and info.attempt == 1):
            self._broken = True  # nothing to publish: no stream client
            return self
        if self._channel:
            self._run_id, self._attempt = info.workflow_id, info.attempt
            if info.attempt > 1:
                self._retry_notice_live(info.attempt, info.heartbeat_details)
            if self._live:
                self._task = asyncio.create_task(self._run())
            return self
        self._client = WorkflowStreamClient.from_within_activity(
            batch_interval=timedelta(hours=1), max_retry_duration=timedelta(seconds=30)
        )
        if info.attempt > 1:
            await self._retry_notice(info.attempt, info.heartbeat_details)
        if self._live:
            self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, exc_type: object, *_: object) -> None:
        if self._task is not None:
            self._stop.set()
            if exc_type is not None:
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._channel:
            if exc_type is None and self._text is not None:
                self._send_live(final=True)
            return
        if exc_type is None and self.streamed > 0:
            await self._send(final=True)  # the rest of a step that was streamed

    def add(self, text: str) -> None:
        """Queue ``text`` (the next characters of the reply) for the next batch."""
        if self._text is None:
            self._text = redaction.PieceRedactor(redaction.current())
        self._text.add(text)
        self._dirty = True

    async def _retry_notice(self, attempt: int, details: Any) -> None:
        error = "the previous attempt did not finish (worker lost or timed out)"
        if details and isinstance(details[0], dict) and details[0].get("error"):
            error = str(details[0]["error"])
        self._publish({"type": "model_retry", "attempt": attempt, "error": error})
        await self._flush()

    def _retry_notice_live(self, attempt: int, details: Any) -> None:
        error = "the previous attempt did not finish (worker lost or timed out)"
        if details and isinstance(details[0], dict) and details[0].get("error"):
            error = str(details[0]["error"])
        item = {"type": "model_retry", "turn": self._turn, "at": _now()}
        item.update(attempt=attempt, error=error)
        BROKER.delta(self._run_id, redaction.current().value(item))

    def _send_live(self, final: bool = False) -> None:
        """Hand the text not handed yet to the live channel (what is safe now, or all of it).

        ``streamed`` stays 0: these deltas are not in the run's stream, whose ``text_delta``
        at the step's end carries the whole reply.
        """
        if self._text is None:
            return
        self._dirty = False
        piece = self._text.take(final)
        if not piece:
            return
        item = {"type": "text_delta", "turn": self._turn, "at": _now(), "delta": piece}
        item.update(pos=self._text.sent_chars, attempt=self._attempt)
        BROKER.delta(self._run_id, item)  # already redacted by the PieceRedactor
        self._text.sent(piece)
        self.batches += 1

    async def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._batch)
            if self._stop.is_set() or not self._dirty or self._broken:
                continue
            if self._channel:
                self._send_live()
                continue
            if time.monotonic() - self._checked_at >= self._watch_every:
                self._checked_at = time.monotonic()
                self._watched = await self._ask_watched()
            if self._watched:
                await self._send()

    async def _ask_watched(self) -> bool:
        assert self._client is not None
        try:
            handle = activity.client().get_workflow_handle(activity.info().workflow_id or "")
            return bool(await handle.query(WATCHED_QUERY, result_type=bool))
        except Exception as exc:  # noqa: BLE001 - an old worker or a busy one: do not stream
            log.info("stream_watch_query_failed", error=str(exc))
            return False

    async def _send(self, final: bool = False) -> None:
        """Publish the text not published yet: all of it when ``final``, else what is safe now.

        A secret that may be split between this batch and the next is held back.
        """
        if self._text is None or self._broken:
            return
        self._dirty = False
        piece = self._text.take(final)
        if not piece:
            return
        self._publish({"type": "text_delta", "delta": piece})
        if await self._flush():
            self._text.sent(piece)
            self.streamed = self._text.sent_chars
            self.batches += 1

    def _publish(self, fields: dict[str, Any]) -> None:
        assert self._client is not None
        item = {"type": fields["type"], "turn": self._turn, "at": _now()}
        item.update(fields)
        # leaves the activity by the stream client, not through the interceptor: redact here
        self._client.topic(TOPIC).publish(redaction.current().value(item))

    async def _flush(self) -> bool:
        if self._client is None or self._broken:
            return False
        try:
            await self._client.flush()
            return True
        except Exception as exc:  # noqa: BLE001 - the stream is best effort; the reply is not
            self._broken = True
            log.warning("stream_publish_failed", error=str(exc))
            return False
