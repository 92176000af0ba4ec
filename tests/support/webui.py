"""What the Temporal Web UI reads of a run."""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowHandle


async def current_details(handle: WorkflowHandle[Any, Any]) -> str:
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return meta.current_details


async def activity_summaries(
    client: Client, handle: WorkflowHandle[Any, Any]
) -> list[tuple[str, str | None]]:
    """(activity type, decoded summary) of every ActivityTaskScheduled event and every local
    activity's marker (``spec.resolve``, local tools: the Web UI shows the same summary), in
    order."""
    out = []
    async for ev in handle.fetch_history_events():
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            name = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.event_type == EventType.EVENT_TYPE_MARKER_RECORDED and (
            ev.marker_recorded_event_attributes.marker_name == "core_local_activity"
        ):
            data = ev.marker_recorded_event_attributes.details["data"].payloads[0].data
            name = json.loads(data)["activity_type"]
        else:
            continue
        summary = None
        if ev.HasField("user_metadata") and ev.user_metadata.HasField("summary"):
            (summary,) = await client.data_converter.decode([ev.user_metadata.summary])
        out.append((name, summary))
    return out
