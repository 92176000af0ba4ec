"""Reading a run's events cheaply: the workers' live channels, the history, the stream (issue #38).

:func:`run_events` is the one reader the console (``GET /runs/{id}/events``), ``agentctl follow``
and the AG-UI adapter call. It yields the items of docs/contract.md "Event stream", in order,
each with its ``offset``, and ends after ``run_finished``, like :func:`workers.client.follow`,
but costs a watched run (almost) no Temporal action and no history event:

* **step items** come from the live channel of the worker that runs the workflow's tasks
  (``GET /live/{run_id}``, :mod:`workers.live_server`), which hands them over as the workflow
  emits them, with the offsets they have in the run's Workflow Stream;
* **text deltas** come from the live channel of the worker that runs the model step; they never
  enter the history (``"live": true``, ``offset`` = the last step item's, ``chars`` = characters
  of the step's text given so far). When the step ends, the run's own ``text_delta`` (the whole
  reply, in the history) gives only what the live deltas had not; if they differ, a
  ``model_retry`` voids them first, so the contract holds: a step's deltas after its last
  ``model_retry`` add up to its reply;
* **a held call's ``tool_finished``** (a local tool's call run at the start of the next model
  step) comes from the model step's worker too, before the step's text (``"live": true``); the
  workflow's own for that call is then skipped (its offset is not given);
* the workers are found without a call into the run: their identity (``<pid>@<host>
  live=<url>``) is in the task queue's pollers (``DescribeTaskQueue``) and in the history's
  ``WorkflowTaskStarted`` events, read with a long poll (``GetWorkflowExecutionHistory`` with
  ``wait_new_event``), neither an action nor an event;
* **what a channel could not give** (a worker restarted, a gap in the offsets, a run finished
  before anyone watched, a workflow task after which no item came) is read with one query of
  the stream (``__temporal_workflow_stream_poll``: an action, no event), from the first offset
  missing. So a reader that reconnects from its last step item's offset loses nothing.

With no live channel in reach (no secret, workers that publish none), it is
:func:`workers.client.follow` (Update polls).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import structlog
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.workflow_streams import PollInput, PollResult
from temporalio.service import RPCError

from activities.live import sign_token
from workers import client as rc
from workers.live_merge import Merge
from workflows.events import TOPIC

__all__ = ["ReaderStats", "run_events"]

log = structlog.get_logger("workers.live_reader")

POLL_QUERY = "__temporal_workflow_stream_poll"
GAP_SECONDS = 1.0
"""How long a gap in the offsets (or a workflow task after which no item came) may last before
the stream is queried."""
REDISCOVER_SECONDS = 5.0
"""How often the task queue's pollers are listed again while a run is open."""
TOKEN_SECONDS = 3600.0
"""Lifetime of the live tokens the reader signs (one per connection)."""


@dataclass
class ReaderStats:
    """What one :func:`run_events` call did (for ``make bench`` and tests)."""

    queries: int = 0
    """Stream queries (each a Temporal action, no history event)."""
    channels: int = 0
    """Live channel connections opened."""
    step_items: int = 0
    live_deltas: int = 0
    fallback: bool = False
    """True when it read through Update polls (:func:`workers.client.follow`)."""


def _identity_urls(identity: str) -> str | None:
    from workers.live_server import live_url_of

    return live_url_of(identity)


async def _pollers(client: Client, task_queue: str) -> set[str] | None:
    """Live URLs of the workers polling ``task_queue`` (workflow and activity tasks).

    None when no worker polls it at all (none is up yet, or all are down).
    """
    urls: set[str] = set()
    seen = False
    for kind in (TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW, TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY):
        req = DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=kind,
        )
        try:
            resp = await client.workflow_service.describe_task_queue(req)
        except RPCError as e:
            log.info("live_pollers_unreadable", task_queue=task_queue, error=e.message)
            continue
        for p in resp.pollers:
            seen = True
            url = _identity_urls(p.identity)
            if url:
                urls.add(url)
    return urls if seen else None


async def _channel(
    url: str,
    run_id: str,
    from_offset: int,
    secret: bytes,
    out: asyncio.Queue[tuple[str, Any]],
) -> None:
    """Read one worker's live channel into ``out`` as ``("item", item)``; ``("gone", url)`` at end."""
    import aiohttp

    headers = {"Authorization": f"Bearer {sign_token(secret, run_id, TOKEN_SECONDS)}"}
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=60)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(
                f"{url}/live/{run_id}", params={"from": str(from_offset)}, headers=headers
            ) as resp,
        ):
            if resp.status != 200:
                log.warning("live_channel_refused", url=url, status=resp.status)
                return
            data: list[str] = []
            async for raw in resp.content:
                line = raw.decode().rstrip("\r\n")
                if line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif not line and data:
                    item = json.loads("\n".join(data))
                    data = []
                    if isinstance(item, dict):
                        await out.put(("item", item))
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        log.info("live_channel_lost", url=url, error=str(e)[:200])
    finally:
        await out.put(("gone", url))


async def _history(client: Client, run_id: str, out: asyncio.Queue[tuple[str, Any]]) -> None:
    """Long-poll the run's history (no action, no event): workers' identities, tasks, the end.

    Puts ``("worker", identity)`` for each workflow task started, ``("task", None)`` for each
    workflow task completed after the reader began, ``("closed", continued_as_new)`` at the end of
    each run of the chain.
    """
    while True:
        cont, seen = False, 0
        try:
            desc = await client.get_workflow_handle(run_id).describe()
            known = desc.history_length
            handle = client.get_workflow_handle(run_id, run_id=desc.run_id)
            async for ev in handle.fetch_history_events(wait_new_event=True, skip_archival=True):
                seen = ev.event_id
                cont = await _history_event(ev, known, out) or cont
        except RPCError as e:  # the server went away a moment: read this run again
            log.info("live_history_interrupted", run_id=run_id, error=e.message, at=seen)
            await asyncio.sleep(1.0)
            continue
        await out.put(("closed", cont))
        if not cont:
            return


async def _history_event(ev: Any, known: int, out: asyncio.Queue[tuple[str, Any]]) -> bool:
    """Put what ``ev`` tells the reader (see :func:`_history`); True at continue-as-new."""
    et = ev.event_type
    if et == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
        await out.put(("worker", ev.workflow_task_started_event_attributes.identity))
    elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
        await out.put(("worker", ev.activity_task_started_event_attributes.identity))
    elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and ev.event_id > known:
        await out.put(("task", None))
    return et == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW


async def _query(client: Client, run_id: str, from_offset: int) -> list[dict[str, Any]]:
    """The stream's retained items from ``from_offset`` (one query per page; the latest run)."""
    handle = client.get_workflow_handle(run_id)
    convert = client.data_converter.payload_converter
    from temporalio.contrib.workflow_streams._types import (  # the wire form of PollResult
        _decode_payload,
    )

    out: list[dict[str, Any]] = []
    offset = from_offset
    while True:
        res = await handle.query(
            POLL_QUERY, PollInput(topics=[TOPIC], from_offset=offset), result_type=PollResult
        )
        for w in res.items:
            value = convert.from_payload(_decode_payload(w.data))
            item: dict[str, Any] = dict(value) if isinstance(value, dict) else {"type": "unknown"}
            item["offset"] = w.offset
            out.append(item)
        offset = res.next_offset
        if not res.more_ready:
            return out


async def run_events(
    client: Client,
    run_id: str,
    from_offset: int = 0,
    *,
    secret: bytes | None,
    skip_chars: int = 0,
    stats: ReaderStats | None = None,
    gap_seconds: float = GAP_SECONDS,
) -> AsyncGenerator[dict[str, Any], None]:
    """The run's events from ``from_offset`` on, as they happen (see the module docstring).

    Args:
        client: a connected client.
        run_id: the run's workflow id.
        from_offset: the first step offset wanted (after a disconnect: the last item's
            ``offset`` + 1).
        secret: the live channel's secret (``workers.live_server.live_secret``); None: Update
            polls only (:func:`workers.client.follow`).
        skip_chars: after a disconnect within a model step, the ``chars`` of the last live delta
            received: that much of the step's text is not given again.
        stats: filled with what the reader did.
        gap_seconds: how long a missing item is waited for before the stream is queried.

    Yields:
        Event dicts with ``offset`` (and ``live``/``chars`` on live deltas); ends after
        ``run_finished``.

    Raises:
        temporalio.service.RPCError: no such run (``NOT_FOUND``) or the server is unreachable.
    """
    stats = stats if stats is not None else ReaderStats()
    desc = await client.get_workflow_handle(run_id).describe()
    urls = await _pollers(client, desc.task_queue) if secret is not None else set()
    if secret is None or urls == set():  # workers without a live channel: the stream's polls
        stats.fallback = True
        async for ev in rc.follow(client, run_id, from_offset):
            yield ev
        return
    reader = _Reader(client, run_id, desc, secret, Merge(from_offset, skip_chars), stats)
    reader.gap = gap_seconds
    try:
        for url in urls or ():  # none polls yet: the history names the ones that come
            reader.connect(url)
        while not reader.merge.finished:
            out, ended = await reader.next_batch()
            for ev in out:
                yield ev
            if ended:
                return
    finally:
        await reader.close()


class _Reader:
    """:func:`run_events` past its start: channels, the history's long poll, deadlines, fills."""

    def __init__(
        self,
        client: Client,
        run_id: str,
        desc: Any,
        secret: bytes,
        merge: Merge,
        stats: ReaderStats,
    ) -> None:
        self.client = client
        self.run_id = run_id
        self.secret = secret
        self.merge = merge
        self.stats = stats
        self.task_queue: str = desc.task_queue
        self.gap = GAP_SECONDS
        self.queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.watchers = [asyncio.ensure_future(_history(client, run_id, self.queue))]
        now = time.monotonic()
        # a run with tasks done: items are expected from a channel soon, else from the stream
        self.expect_at: float | None = now + self.gap if desc.history_length > 3 else None
        running = desc.status == WorkflowExecutionStatus.RUNNING
        self.closed_at: float | None = None if running else now
        self.rediscover_at = now + REDISCOVER_SECONDS
        self.channel_at = 0.0  # when a channel last gave a step item

    def connect(self, url: str) -> None:
        """Read ``url``'s live channel (again, if the last connection ended)."""
        if url not in self.tasks or self.tasks[url].done():
            self.stats.channels += 1
            self.tasks[url] = asyncio.ensure_future(
                _channel(url, self.run_id, self.merge.next, self.secret, self.queue)
            )

    async def fill(self) -> list[dict[str, Any]]:
        """What the stream holds from the first offset missing (one query a page)."""
        self.stats.queries += 1
        try:
            items = await _query(self.client, self.run_id, self.merge.next)
        except RPCError as e:
            log.info("live_fill_failed", run_id=self.run_id, error=e.message)
            return []
        out: list[dict[str, Any]] = []
        for it in items:
            out.extend(self.merge.step(it))
        return out

    def _wait(self) -> float | None:
        deadlines = [d for d in (self.expect_at, self.closed_at, self.rediscover_at) if d]
        if self.merge.pending:
            deadlines.append(self.merge.step_at + self.gap)
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _take(self, kind: str | None, value: Any) -> list[dict[str, Any]]:
        """Handle one message of the queue; returns the events to give."""
        m = self.merge
        if kind == "item" and value.get("hello"):
            first, end = value.get("first"), value.get("end")
            if first is not None and end is not None and first <= m.next <= end:
                self.expect_at = None  # this channel holds the run from where we are
        elif kind == "item" and value.get("live"):
            self.stats.live_deltas += 1
            return m.live(value)
        elif kind == "item":
            self.stats.step_items += 1
            self.expect_at, self.channel_at = None, time.monotonic()
            return m.step(value)
        elif kind == "worker":
            url = _identity_urls(str(value))
            if url:
                self.connect(url)
        elif kind == "task" and time.monotonic() - self.channel_at > 3.0:
            self.expect_at = time.monotonic() + self.gap  # nothing came with it: wait a little
        elif kind == "closed" and value:  # continued as new: read the next run's history
            self.watchers.append(
                asyncio.ensure_future(_history(self.client, self.run_id, self.queue))
            )
        elif kind == "closed":
            self.closed_at = time.monotonic() + self.gap
        return []

    async def next_batch(self) -> tuple[list[dict[str, Any]], bool]:
        """The next events to give (maybe none), and whether the run ended without more."""
        kind: str | None = None
        value: Any = None
        with contextlib.suppress(TimeoutError):
            kind, value = await asyncio.wait_for(self.queue.get(), self._wait())
        out = self._take(kind, value)
        m, now = self.merge, time.monotonic()
        gap = bool(m.pending) and now >= m.step_at + self.gap
        if gap or (self.expect_at is not None and now >= self.expect_at):
            self.expect_at = None
            out.extend(await self.fill())
        ended = False
        if self.closed_at is not None and now >= self.closed_at and not m.finished:
            out.extend(await self.fill())
            ended = not m.finished  # closed without run_finished (terminated, timed out)
        if now >= self.rediscover_at and not ended:
            self.rediscover_at = now + REDISCOVER_SECONDS
            for url in await _pollers(self.client, self.task_queue) or ():
                self.connect(url)
        return out, ended

    async def close(self) -> None:
        """Stop reading the channels and the history."""
        tasks = [*self.watchers, *self.tasks.values()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
