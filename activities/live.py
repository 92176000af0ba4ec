"""The worker's live channel: a run's events handed to subscribers outside the history (issue #38).

One :data:`BROKER` per process. Two kinds of item go in, keyed by the run's workflow id:

* **step items**: what the workflow emits on its event stream (``workflows.events.RunEvents``),
  each with its stream ``offset``, handed over by the workflow code as it runs (never while it
  replays: :meth:`LiveBroker.step` is called only outside replay). They are the same items, with
  the same offsets, that the run keeps in its Workflow Stream; the stream stays the record.
* **live deltas**: ``text_delta`` and ``model_retry`` items of a model step, from the model
  activity (:class:`activities.streaming.DeltaPublisher`), marked ``"live": true`` and without an
  offset. They never enter the history: when the step ends, the workflow emits the reply text as
  one ``text_delta`` (with an offset) and the reader (``workers.live_reader``) gives a subscriber
  only what its live deltas had not.

The worker serves :data:`BROKER` over HTTP (``workers.live_server``): ``GET /live/{run_id}`` as
Server-Sent Events, with a token signed by :func:`sign_token`. Nothing here costs a Temporal action
or a history event. The broker keeps, per run, the last :data:`MAX_STEP_ITEMS` step items and the
live deltas of the newest model step (so a subscriber arriving late, or reconnecting, gets them),
and forgets a run :data:`IDLE_SECONDS` after its last item when nobody subscribes.

Thread safety: the workflow code runs in the worker's workflow threads; :meth:`LiveBroker.step`
and :meth:`LiveBroker.delta` hand the item to the broker's event loop with
``call_soon_threadsafe``. Until :meth:`LiveBroker.bind` gave it a loop (no live server in this
process) both are no-ops.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BROKER",
    "IDLE_SECONDS",
    "MAX_STEP_ITEMS",
    "LiveBroker",
    "sign_token",
    "verify_token",
]

MAX_STEP_ITEMS = 256
"""Step items kept per run (the newest)."""
MAX_DELTAS = 4000
"""Live deltas kept for the newest model step of a run."""
MAX_RUNS = 1000
"""Runs kept at most; beyond it the one idle the longest is forgotten."""
IDLE_SECONDS = 300.0
"""A run nobody subscribes to is forgotten this long after its last item."""
QUEUE_ITEMS = 10_000
"""Items a subscriber may lag behind before it is dropped (its reader then reconnects)."""


@dataclass
class _Run:
    steps: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_STEP_ITEMS))
    deltas: list[dict[str, Any]] = field(default_factory=lambda: [])
    delta_turn: int = -1
    subscribers: set[asyncio.Queue[dict[str, Any] | None]] = field(default_factory=lambda: set())
    touched: float = 0.0


class LiveBroker:
    """Per-process hub of live items; see the module docstring."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()

    @property
    def serving(self) -> bool:
        """True once :meth:`bind` gave a loop (a live server runs in this process)."""
        return self._loop is not None

    def bind(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Serve from ``loop`` (the live server's); None: stop taking items."""
        self._loop = loop
        if loop is None:
            self._runs.clear()

    def step(self, run_id: str, offset: int, item: dict[str, Any]) -> None:
        """Hand over a step item (``offset``: its position in the run's stream). Any thread."""
        self._hand(run_id, {**item, "offset": offset})

    def delta(self, run_id: str, item: dict[str, Any]) -> None:
        """Hand over a live delta (``text_delta`` or ``model_retry`` with ``turn``). Any thread."""
        self._hand(run_id, {**item, "live": True})

    def watched(self, run_id: str) -> bool:
        """True while someone subscribes to ``run_id`` on this process."""
        run = self._runs.get(run_id)
        return run is not None and bool(run.subscribers)

    def _hand(self, run_id: str, item: dict[str, Any]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._take(run_id, item)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(self._take, run_id, item)

    def _take(self, run_id: str, item: dict[str, Any]) -> None:
        run = self._runs.get(run_id)
        if run is None:
            self._forget_idle()
            run = self._runs[run_id] = _Run()
        run.touched = time.monotonic()
        if item.get("live"):
            turn = int(item.get("turn") or 0)
            if turn != run.delta_turn:
                run.deltas, run.delta_turn = [], turn
            if len(run.deltas) < MAX_DELTAS:
                run.deltas.append(item)
        else:
            if run.steps and int(run.steps[-1]["offset"]) >= int(item["offset"]):
                return  # a workflow task retried: the same offsets again
            run.steps.append(item)
        for q in list(run.subscribers):
            try:
                q.put_nowait(item)
            except asyncio.QueueFull:
                run.subscribers.discard(q)
                with contextlib.suppress(asyncio.QueueFull):
                    q.put_nowait(None)

    def _forget_idle(self) -> None:
        now = time.monotonic()
        gone = [
            k for k, r in self._runs.items() if not r.subscribers and now - r.touched > IDLE_SECONDS
        ]
        for k in gone:
            del self._runs[k]
        if len(self._runs) >= MAX_RUNS:
            idle = [(r.touched, k) for k, r in self._runs.items() if not r.subscribers]
            if idle:
                del self._runs[min(idle)[1]]

    async def subscribe(
        self, run_id: str, from_offset: int = 0
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The run's kept step items from ``from_offset`` and the newest step's deltas, then live.

        Yields first ``{"hello": true, "first": F, "end": E}`` (the offsets of the oldest step item
        kept and the one after the newest, None when none is kept), then dicts (step items with
        ``offset``, live deltas with ``live``); ends when the subscriber lagged
        :data:`QUEUE_ITEMS` behind (it should reconnect). Must run on the bound loop.
        """
        run = self._runs.get(run_id)
        if run is None:
            self._forget_idle()
            run = self._runs[run_id] = _Run(touched=time.monotonic())
        q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(QUEUE_ITEMS)
        backlog = [s for s in run.steps if int(s["offset"]) >= from_offset] + list(run.deltas)
        run.subscribers.add(q)
        first = int(run.steps[0]["offset"]) if run.steps else None
        end = int(run.steps[-1]["offset"]) + 1 if run.steps else None
        try:
            yield {"hello": True, "first": first, "end": end}
            for item in backlog:
                yield item
            while True:
                item = await q.get()
                if item is None:
                    return
                yield item
        finally:
            run.subscribers.discard(q)
            run.touched = time.monotonic()


BROKER = LiveBroker()
"""The process's broker."""


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def sign_token(secret: bytes, run_id: str, ttl_seconds: float = 300.0) -> str:
    """A token that lets its holder read ``run_id``'s live items until ``ttl_seconds`` from now.

    Format ``v1.<expiry unix seconds>.<base64url HMAC-SHA256(secret, "v1|run_id|expiry")>``.
    """
    expiry = int(time.time() + ttl_seconds)
    mac = hmac.new(secret, f"v1|{run_id}|{expiry}".encode(), hashlib.sha256).digest()
    return f"v1.{expiry}.{_b64(mac)}"


def verify_token(secret: bytes, token: str, run_id: str) -> bool:
    """True when ``token`` is :func:`sign_token`'s for ``run_id`` with ``secret``, not expired."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != "v1" or not parts[1].isdigit():
        return False
    expiry = int(parts[1])
    if expiry < time.time():
        return False
    mac = hmac.new(secret, f"v1|{run_id}|{expiry}".encode(), hashlib.sha256).digest()
    return hmac.compare_digest(_b64(mac), parts[2])
