"""Workflow histories read back from the server: continue-as-new chains, event times, phases.

What the scenarios measure from histories: the bytes and payloads of every run of a chain
(:func:`fetch_chain`), when the model activity was scheduled (:func:`model_scheduled_times`),
the seconds spent per phase (:func:`phase_breakdown`) and the activities by type.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client


def ts(event: Any) -> float:
    """Event time in seconds since the epoch."""
    return event.event_time.seconds + event.event_time.nanos / 1e9


def _payload_sizes(event: Any) -> list[int]:
    sizes: list[int] = []
    for attr in (
        "workflow_execution_started_event_attributes",
        "activity_task_scheduled_event_attributes",
        "activity_task_completed_event_attributes",
        "workflow_execution_completed_event_attributes",
        "workflow_execution_continued_as_new_event_attributes",
        "marker_recorded_event_attributes",
    ):
        if not event.HasField(attr):
            continue
        a = getattr(event, attr)
        for fld in ("input", "result"):
            if hasattr(a, fld) and a.HasField(fld):
                sizes += [p.ByteSize() for p in getattr(a, fld).payloads]
    return sizes


async def fetch_chain(
    client: Client, workflow_id: str, first_run_id: str | None
) -> list[dict[str, Any]]:
    """Every run of a continue-as-new chain, first first: run id, events, size, biggest payload."""
    out = []
    run_id = first_run_id
    seen = 0
    while run_id and seen < 1000:
        seen += 1
        h = client.get_workflow_handle(workflow_id, run_id=run_id)
        hist = await h.fetch_history()
        desc = await h.describe()
        info = desc.raw_description.workflow_execution_info
        events = list(hist.events)
        payloads = [s for e in events for s in _payload_sizes(e)]
        nxt = None
        last = events[-1] if events else None
        if last is not None and last.HasField(
            "workflow_execution_continued_as_new_event_attributes"
        ):
            nxt = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        out.append(
            {
                "run_id": run_id,
                "events": events,
                "event_count": len(events),
                "history_size_bytes": int(info.history_size_bytes)
                or sum(e.ByteSize() for e in events),
                "max_payload_bytes": max(payloads) if payloads else 0,
                "payload_bytes_total": sum(payloads),
                "status": desc.status.name if desc.status else None,
                "last_event": EventType.Name(last.event_type) if last is not None else None,
            }
        )
        run_id = nxt
    return out


def activity_types(events: Iterable[Any]) -> dict[int, str]:
    """Scheduled event id -> activity type name."""
    return {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }


def model_scheduled_times(events: Sequence[Any], model_type: str) -> list[float]:
    """Times at which the model activity was scheduled (one per turn)."""
    return [
        ts(e)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == model_type
    ]


def phase_breakdown(events: Sequence[Any]) -> dict[str, list[float]]:
    """Seconds per phase over a history: activity dispatch/execution per type, workflow tasks.

    * ``<type>.dispatch``: activity scheduled -> started (server matching + worker poll).
    * ``<type>.exec``: started -> completed (the activity's own code, as the server sees it).
    * ``wft.dispatch``: workflow task scheduled -> started.
    * ``wft.process``: workflow task started -> completed (the worker running workflow code,
      converting payloads, and the RPC).
    * ``wft.after_activity``: activity completed -> next workflow task started (the hop a
      result takes back into the workflow).
    """
    types = activity_types(events)
    sched_t: dict[int, float] = {}
    started_t: dict[int, float] = {}
    wft_sched: dict[int, float] = {}
    wft_start: dict[int, float] = {}
    phases: dict[str, list[float]] = {}
    last_activity_done: float | None = None

    def add(k: str, v: float) -> None:
        phases.setdefault(k, []).append(v)

    for e in events:
        t = ts(e)
        et = e.event_type
        if et == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            sched_t[e.event_id] = t
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            sid = e.activity_task_started_event_attributes.scheduled_event_id
            started_t[sid] = t
            if sid in sched_t:
                add(f"{types.get(sid, '?')}.dispatch", t - sched_t[sid])
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sid = e.activity_task_completed_event_attributes.scheduled_event_id
            if sid in started_t:
                add(f"{types.get(sid, '?')}.exec", t - started_t[sid])
            last_activity_done = t
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            wft_sched[e.event_id] = t
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            sid = e.workflow_task_started_event_attributes.scheduled_event_id
            wft_start[e.event_id] = t
            if sid in wft_sched:
                add("wft.dispatch", t - wft_sched[sid])
            if last_activity_done is not None:
                add("wft.after_activity", t - last_activity_done)
                last_activity_done = None
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            st = e.workflow_task_completed_event_attributes.started_event_id
            if st in wft_start:
                add("wft.process", t - wft_start[st])
    return phases


def count_activities(events: Iterable[Any]) -> dict[str, int]:
    """How many activities of each type were scheduled."""
    out: dict[str, int] = {}
    for name in activity_types(events).values():
        out[name] = out.get(name, 0) + 1
    return out
