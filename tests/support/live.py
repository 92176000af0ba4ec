"""What the tests of watching a run share: the text of each step, reading items or SSE while
approving, a run long enough to continue as new, watching through a worker's crash."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
from temporalio.client import Client

from tests.support.harness import Harness, through_a_worker_crash
from workers import client as rc
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workflows.models import RunResult

CHAIN_THRESHOLD = 96 * 1024
"""``continue_as_new_at_bytes`` of :func:`chain_of_turns`' agent."""
TWO_STEPS_AND_AN_APPROVAL = [
    "run_started",
    "model_started",
    "model_finished",
    "approval_requested",
    "model_started",
    "model_finished",
    "run_finished",
]
"""The run, model step and approval items of a run of two model steps with an approval between."""


def step_texts(events: list[dict[str, Any]]) -> list[str]:
    """The text of each model step from its deltas (after the step's last model_retry)."""
    out: list[str] = []
    current: list[str] | None = None
    for ev in events:
        if ev["type"] in ("model_started", "model_retry"):
            current = []
        elif ev["type"] == "text_delta":
            assert current is not None, "a text_delta outside a model step"
            current.append(ev["delta"])
        elif ev["type"] == "model_finished":
            assert current is not None
            out.append("".join(current))
            current = None
    return out


def events_of(msgs: list[tuple[str | None, str, str]]) -> list[dict[str, Any]]:
    """The JSON of the ``message`` events of an SSE stream (``(id, event, data)`` each)."""
    return [json.loads(d) for _, e, d in msgs if e == "message"]


async def read_sse_approving(
    resp: aiohttp.ClientResponse, client: Client, run_id: str
) -> list[tuple[str | None, str, str]]:
    """(id, event, data) of every SSE message until the server closes the stream, approving
    (as ``alice``) each ``approval_requested`` as it comes."""
    out: list[tuple[str | None, str, str]] = []
    ev_id, event, data = None, "message", []
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("id: "):
            ev_id = line[4:]
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data.append(line[6:])
        elif not line and data:
            out.append((ev_id, event, "\n".join(data)))
            item = json.loads(out[-1][2])
            if item.get("type") == "approval_requested":
                await rc.decide(client, run_id, item["tool_call_id"], "approve", "alice")
            ev_id, event, data = None, "message", []
    return out


async def read_approving(
    items: AsyncIterator[dict[str, Any]],
    client: Client,
    run_id: str,
    *,
    into: list[dict[str, Any]] | None = None,
    until: Callable[[dict[str, Any]], bool] | None = None,
) -> list[dict[str, Any]]:
    """Every item of ``items`` (``rc.follow`` or ``run_events`` of ``run_id``), kept in ``into``
    (a new list if None) and returned, approving (as ``alice``) each ``approval_requested`` as it
    comes; stops after the first item ``until`` is true for, else when ``items`` ends."""
    out: list[dict[str, Any]] = [] if into is None else into
    async for ev in items:
        out.append(ev)
        if ev["type"] == "approval_requested":
            await rc.decide(client, run_id, ev["tool_call_id"], "approve", "alice")
        if until is not None and until(ev):
            break
    return out


def chain_of_turns(turns: int) -> tuple[list[str], ScriptedModel, dict[str, Any]]:
    """A run long enough to continue as new: ``turns`` turns each writing a long text (~1.6 KB)
    with a ``record`` call, then ``all done``; ``CHAIN_THRESHOLD`` bytes of history at most.

    Returns:
        ``(texts, model, agents)``: each turn's text, the scripted model (16 chars a chunk) and
        the ``agents`` of a :class:`Harness`.
    """
    texts = [f"Turn {i}: " + ("lorem ipsum dolor sit amet " * 60) for i in range(turns)]
    script = [tool_call("record", {"label": f"t{i}"}, content=texts[i]) for i in range(turns)]
    model = ScriptedModel([*script, text("all done")], chunk_chars=16)
    limits = {"continue_as_new_at_bytes": CHAIN_THRESHOLD, "max_turns": 40}
    return texts, model, {"default": {"limits": limits}}


async def watched_through_a_crash(
    h: Harness,
    address: str,
    log: Path,
    read: Callable[[str], AsyncIterator[dict[str, Any]]],
    crash_at: Callable[[dict[str, Any]], bool],
) -> tuple[RunResult, list[dict[str, Any]]]:
    """Start a run (``write slowly``) on a worker process, read its items with ``read(run_id)``
    (approving, :func:`read_approving`), and once an item ``crash_at`` is true for has come,
    SIGKILL the worker and start another (:func:`through_a_worker_crash`).

    Returns:
        The run's result (awaited at most 60 s) and every item read.
    """
    events: list[dict[str, Any]] = []
    reading: list[asyncio.Task[list[dict[str, Any]]]] = []

    async def start() -> Any:
        handle = await h.start("write slowly")
        reader = read_approving(read(handle.id), h.client, handle.id, into=events)
        reading.append(asyncio.ensure_future(reader))
        return handle

    async def finish(handle: Any) -> RunResult:
        await asyncio.wait_for(reading[0], timeout=60)
        return await asyncio.wait_for(handle.result(), timeout=60)

    def crash_when() -> bool:
        return any(crash_at(ev) for ev in events)

    try:
        res = await through_a_worker_crash(h, address, log, start, crash_when, finish)
    finally:
        for task in reading:
            task.cancel()
    return res, events
