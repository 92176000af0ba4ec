"""The event stream of a run (docs/contract.md "Event stream"), workflow side.

:class:`RunEvents` wraps a Temporal Workflow Stream (``temporalio.contrib.workflow_streams``) on
topic ``events``. The workflow emits its own events (status, tools, approvals, the end) with
:meth:`RunEvents.emit`; the model activity publishes ``text_delta`` and ``model_retry`` items to the
same topic through the stream's publish signal (:mod:`activities.streaming`). Every item is a JSON
object ``{"type", "turn", "at", ...}``.

Cost (measured, README "Live runs"): an item emitted by the workflow is appended to a list in the
workflow's memory and creates no command and no history event. History grows only when someone
watches: each subscriber poll is an Update (two events carrying the items it returns) and each batch
of text deltas from the activity is a Signal. The activity publishes deltas only while
:meth:`RunEvents.watched` is true (it asks through the query :data:`WATCHED_QUERY`); for a step
nobody watched, the workflow emits the reply text as one ``text_delta`` when the step ends, so the
deltas of every step add up to its reply text either way.

Each item is also handed, outside replay, to the live channel of the worker running the task
(:data:`activities.live.BROKER`, no command): readers of the channel (``workers.live_reader``)
get the items without a poll, and the model activity of a worker that serves a channel sends its
text there instead of signalling it (docs/live-runs.md).

The retained items are bounded: within a run by :data:`MAX_RETAINED_ITEMS` and
:data:`MAX_RETAINED_BYTES`, and :meth:`RunEvents.carry` hands at most :data:`MAX_CARRIED_ITEMS` /
:data:`MAX_CARRIED_BYTES` of the newest to the next run on continue-as-new (its input is stored in
its history). A subscriber asking for a truncated offset restarts at the oldest retained item.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

from activities.rules import clip

with workflow.unsafe.imports_passed_through():
    from temporalio.contrib.workflow_streams import (
        PollInput,
        PollResult,
        PublishInput,
        WorkflowStream,
        WorkflowStreamState,
    )

    from activities.live import BROKER

TOPIC = "events"
"""The stream topic every run publishes on."""
WATCHED_QUERY = "__agent_events_watched"
"""Query answering whether a subscriber polled the stream recently (bool)."""
WATCH_GRACE_SECONDS = 30.0
"""A run counts as watched while a poll is in flight or one arrived within this many seconds."""
MAX_RETAINED_ITEMS = 4000
"""Most items kept in workflow memory within a run."""
MAX_RETAINED_BYTES = 1024 * 1024
"""Most payload bytes kept within a run; beyond either bound the oldest quarter is truncated."""
MAX_CARRIED_ITEMS = 1000
"""Most items handed to the next run on continue-as-new (its input is history too)."""
MAX_CARRIED_BYTES = 256 * 1024
"""Most payload bytes handed to the next run on continue-as-new."""
PUBLISHER_TTL = timedelta(minutes=15)
"""How long an activity publisher's de-duplication state survives continue-as-new."""


class _WatchedStream(WorkflowStream):
    """A :class:`WorkflowStream` that counts its subscribers' polls (to tell if anyone watches)."""

    def __init__(self, prior_state: WorkflowStreamState | None) -> None:
        super().__init__(prior_state)
        self.polls_in_flight = 0
        self.last_poll_at: float | None = None

    async def _on_poll(self, payload: PollInput) -> PollResult:
        self.polls_in_flight += 1
        self.last_poll_at = workflow.now().timestamp()
        try:
            return await super()._on_poll(payload)
        finally:
            self.polls_in_flight -= 1
            self.last_poll_at = workflow.now().timestamp()

    def _on_publish(self, payload: PublishInput) -> None:
        """Take a publish signal (an activity's items) and hand the new items to the live channel."""
        start = self.end()
        super()._on_publish(payload)
        if BROKER.serving and not workflow.unsafe.is_replaying():
            run_id = workflow.info().workflow_id
            convert = workflow.payload_converter()
            for i, item in enumerate(self._log[start - self._base_offset :]):
                value = convert.from_payload(item.data)
                if isinstance(value, dict):
                    BROKER.step(run_id, start + i, value)  # pyright: ignore[reportUnknownArgumentType]

    def end(self) -> int:
        """The offset the next item will get."""
        return self._base_offset + len(self._log)

    def retained(self) -> tuple[int, int, list[int]]:
        """(base offset, end offset, payload bytes of each retained item)."""
        sizes = [item.data.ByteSize() for item in self._log]
        return self._base_offset, self._base_offset + len(sizes), sizes


class RunEvents:
    """The run's event stream: construct once in the workflow's ``__init__`` (``@workflow.init``).

    Args:
        prior: the state :meth:`carry` returned in the previous run of a continue-as-new chain,
            or None on a fresh start.

    Raises:
        RuntimeError: not constructed from a method named ``__init__``, or constructed twice
            (from :class:`WorkflowStream`).
    """

    def __init__(self, prior: WorkflowStreamState | None = None) -> None:
        self._stream = _WatchedStream(prior)
        self._topic = self._stream.topic(TOPIC)
        self._status: str | None = None
        workflow.set_query_handler(  # pyright: ignore[reportUnknownMemberType] - SDK: bare Callable
            WATCHED_QUERY, self.watched
        )

    def emit(self, type: str, turn: int, **fields: Any) -> None:
        """Append ``{"type", "turn", "at", **fields}`` (strings clipped) to the stream.

        In-memory only: creates no command. ``at`` is ``workflow.now()`` in ISO-8601.
        """
        item = {"type": type, "turn": turn, "at": workflow.now().isoformat()}
        item.update(clip(fields))
        self._publish(item)
        self._bound(MAX_RETAINED_ITEMS, MAX_RETAINED_BYTES)

    def _publish(self, item: dict[str, Any]) -> None:
        """Append ``item`` to the stream and hand it to the worker's live channel.

        The hand-over (:data:`activities.live.BROKER`) is no command and happens only outside
        replay; a workflow task that is retried hands the same offsets again, which the broker
        drops.
        """
        offset = self._stream.end()
        self._topic.publish(item)
        if BROKER.serving and not workflow.unsafe.is_replaying():
            BROKER.step(workflow.info().workflow_id, offset, item)

    def status(self, turn: int, status: str) -> None:
        """Emit ``status`` when it differs from the last one emitted."""
        if status != self._status:
            self._status = status
            self.emit("status", turn, status=status)

    def model_finished(
        self, turn: int, model: str, usage: dict[str, Any], text: str | None, streamed: int
    ) -> None:
        """End a model step: the part of ``text`` the activity did not stream, then the event.

        Args:
            turn: the turn of the step.
            model: the model that answered.
            usage: its usage (``Usage`` as a dict).
            text: the reply text (None for none).
            streamed: how many characters of ``text`` the activity published as ``text_delta``
                (``ModelReply.streamed_chars``).
        """
        rest = (text or "")[streamed:]
        if rest:
            self._publish(
                {
                    "type": "text_delta",
                    "turn": turn,
                    "at": workflow.now().isoformat(),
                    "delta": rest,
                }
            )
        self.emit("model_finished", turn, model=model, usage=usage)

    def finish(self, turn: int, result: dict[str, Any]) -> None:
        """Emit ``run_finished`` and release waiting subscribers.

        The run must then ``await workflow.wait_condition(workflow.all_handlers_finished)``
        before returning, so released polls complete in this run.
        """
        self.emit("run_finished", turn, result=result)
        self._stream.detach_pollers()

    def detach(self) -> None:
        """Before continue-as-new: release waiting subscribers (they follow to the next run)."""
        self._stream.detach_pollers()

    def carry(self) -> WorkflowStreamState:
        """The stream's state for the next run (pass it to ``RunEvents(prior=...)`` there)."""
        self._bound(MAX_CARRIED_ITEMS, MAX_CARRIED_BYTES, keep=1.0)
        return self._stream.get_state(publisher_ttl=PUBLISHER_TTL)

    def watched(self) -> bool:
        """True while a subscriber's poll is in flight or one came in the last 30 s."""
        s = self._stream
        if s.polls_in_flight > 0:
            return True
        if s.last_poll_at is None:
            return False
        return workflow.now().timestamp() - s.last_poll_at < WATCH_GRACE_SECONDS

    @property
    def offset(self) -> int:
        """The offset the next item will get."""
        return self._stream.retained()[1]

    def _bound(self, max_items: int, max_bytes: int, keep: float = 0.75) -> None:
        """When over ``max_items`` or ``max_bytes``, truncate to ``keep`` of them (newest kept)."""
        base, _end, sizes = self._stream.retained()
        total = sum(sizes)
        if len(sizes) <= max_items and total <= max_bytes:
            return
        keep_items = int(max_items * keep)
        keep_bytes = int(max_bytes * keep)
        cut = max(0, len(sizes) - keep_items)
        kept = sum(sizes[cut:])
        while cut < len(sizes) - 1 and kept > keep_bytes:
            kept -= sizes[cut]
            cut += 1
        if cut > 0:
            self._stream.truncate(base + cut)
