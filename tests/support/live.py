"""What the tests of watching a run share: the text of each step, reading SSE while approving."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from temporalio.client import Client

from workers import client as rc


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
