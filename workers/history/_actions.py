"""Temporal Cloud actions of a run, counted from its history (Temporal Cloud bills per action).

The rules are Temporal Cloud's page "Temporal Cloud Actions" (https://docs.temporal.io/cloud/actions,
read 2026-11-25 and 2026-11-26); only what a history shows can be counted.
"""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType

__all__ = ["billable_actions"]


def billable_actions(events: list[Any]) -> dict[str, int]:
    """Temporal Cloud actions one execution's history shows, by kind.

    The rules are Temporal Cloud's ("Temporal Cloud Actions", docs.temporal.io/cloud/actions,
    read 2026-11-25): one per workflow start (client start, continue-as-new, child workflow start);
    one per timer started; one per ``UpsertWorkflowSearchAttributes`` command (however many keys;
    an upsert of ``TemporalChangeVersion`` alone, written by a patch, is exempt); one per signal;
    one per accepted update; all ``RecordMarker`` commands of one workflow task count as one (the
    page says so of local activities: "Temporal Cloud counts all RecordMarkers from each Workflow
    Task as one action"; patch and side-effect markers are RecordMarkers too, so a task with
    only a patch's marker counts one); two per child workflow started (start and execution); one per
    activity attempt (the ``attempt`` of its started event, so retries count); one per
    workflow-execution-options change. Not in a history, so not counted here (the docs list the
    same exclusions for their own estimate): queries, activity heartbeats, rejected updates.

    Returns ``{kind: count, ..., "total": n}``.
    """
    out: dict[str, int] = {}

    def add(k: str, n: int = 1) -> None:
        out[k] = out.get(k, 0) + n

    marker_task: set[int] = set()  # workflow tasks (by their completed event id) with a marker
    for e in events:
        et = e.event_type
        if et == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            add("workflow_started")
        elif et == EventType.EVENT_TYPE_TIMER_STARTED:
            add("timer_started")
        elif et == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            keys = set(
                e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
            )
            if keys - {"TemporalChangeVersion"}:
                add("search_attribute_upsert")
        elif et == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            add("signal")
        elif et == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            add("update")
        elif et == EventType.EVENT_TYPE_MARKER_RECORDED:
            task = e.marker_recorded_event_attributes.workflow_task_completed_event_id
            if task not in marker_task:
                marker_task.add(task)
                add("markers")
        elif et == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            add("child_workflow", 2)
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            add("activity_attempt", max(1, e.activity_task_started_event_attributes.attempt))
        elif et == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_OPTIONS_UPDATED:
            add("options_updated")
    out["total"] = sum(out.values())
    return out
