"""The state of an audit while it walks a run's histories, event by event."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from temporalio.api.history.v1 import HistoryEvent
from temporalio.converter import DataConverter

from activities.contracts import ToolInfo
from activities.spec import PinnedSpec, Policy
from workers.history._entries import ToolCallEntry
from workflows.models import RunResult


def event_time(event: HistoryEvent) -> datetime:
    """When the event happened (UTC)."""
    return event.event_time.ToDatetime(tzinfo=UTC)


def iso(event: HistoryEvent) -> str:
    """The event's time, ISO-8601 UTC to the millisecond."""
    return event_time(event).isoformat(timespec="milliseconds")


def ms_between(start: HistoryEvent, end: HistoryEvent) -> float:
    """Milliseconds from ``start`` to ``end`` (rounded to 0.1 ms)."""
    return round((event_time(end) - event_time(start)).total_seconds() * 1000, 1)


PATCH_MARKER = "core_patch"
"""``MarkerRecorded`` name of a patch (temporalio core): ``details["patch-data"]`` holds JSON
``{"id": <patch id>, "deprecated": <bool>}`` as ``json/plain``, never through a codec."""


def patch_ids(events: Iterable[HistoryEvent]) -> Iterator[str]:
    """The patch ids of ``events``' patch markers, in order (unreadable markers are skipped)."""
    for ev in events:
        a = ev.marker_recorded_event_attributes
        if not ev.HasField("marker_recorded_event_attributes") or a.marker_name != PATCH_MARKER:
            continue
        for payload in a.details["patch-data"].payloads if "patch-data" in a.details else []:
            try:
                data = json.loads(payload.data)
            except ValueError:
                continue
            if isinstance(data, dict) and isinstance(data.get("id"), str):
                yield data["id"]


class At(NamedTuple):
    """One event of one execution, as a handler sees it."""

    ev: HistoryEvent
    run_id: str
    workflow_id: str

    @property
    def mark(self) -> dict[str, Any]:
        """The common fields of an entry marked by this event: ``time``, ``run_id``, ``event_id``."""
        return {"time": iso(self.ev), "run_id": self.run_id, "event_id": self.ev.event_id}


@dataclass
class Walk:
    """What the audit knows so far: the timeline, the run's request, spec and tool calls.

    ``verdicts``, ``waiting``, ``scheduled`` and ``started_attempts`` belong to one execution
    (the workflow does not carry them across continue-as-new) and are reset by
    :meth:`new_execution`.
    """

    conv: DataConverter
    chain_complete: bool
    timeline: list[Any] = field(default_factory=list)
    req: dict[str, Any] = field(default_factory=dict)
    pinned: PinnedSpec | None = None
    tools: dict[str, ToolCallEntry] = field(default_factory=dict)  # every tool call, by id
    result: RunResult | None = None
    status: str = "running"
    events: int = 0
    paused: bool = False
    interrupted: bool = False
    verdicts: dict[str, str] = field(default_factory=dict)
    waiting: dict[str, list[str]] = field(default_factory=dict)
    scheduled: dict[int, tuple[HistoryEvent, Any]] = field(default_factory=dict)
    started_attempts: dict[int, int] = field(default_factory=dict)
    patches: frozenset[str] = frozenset()  # the patch ids this execution took

    def took(self, patch_id: str) -> bool:
        """Whether this execution took patch ``patch_id`` (a ``core_patch`` marker names it).

        The SDK memoizes ``workflow.patched`` per execution, so an execution that recorded the
        marker anywhere behaved the new way at every point that asked, and one without it the
        old way (at points before the first ask, both ways agree: see each patch's docstring).
        """
        return patch_id in self.patches

    def new_execution(self, events: Iterable[HistoryEvent] = ()) -> None:
        """Forget what belongs to the previous execution of the chain; read ``events``' patches."""
        self.verdicts, self.waiting, self.scheduled, self.started_attempts = {}, {}, {}, {}
        self.patches = frozenset(patch_ids(events))

    def policy(self) -> Policy:
        """The pinned policy (the default one before the spec is known)."""
        return self.pinned.spec.policy if self.pinned else Policy()

    def tool_info(self, name: str) -> ToolInfo | None:
        """The pinned tool called ``name``, if any."""
        if self.pinned is None:
            return None
        return next((t for t in self.pinned.tools if t.name == name), None)

    def budget_may_pause(self) -> bool:
        """Whether the run pauses (invisibly in the history) when its budget is spent."""
        return self.pinned is not None and self.pinned.spec.limits.on_budget == "pause"

    def request_field(self, name: str, default: str) -> str:
        """A field of the run's first request, as text."""
        return str(self.req.get(name, default))
