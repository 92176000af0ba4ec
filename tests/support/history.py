"""Reading a run's history."""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle


async def no_task_failed(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    events = [e async for e in handle.fetch_history_events()]
    failed = [e for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED]
    assert failed == [], failed[0].workflow_task_failed_event_attributes
    return events
