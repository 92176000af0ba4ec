"""What the Temporal Web UI reads of a run."""

from __future__ import annotations

from typing import Any

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHandle


async def current_details(handle: WorkflowHandle[Any, Any]) -> str:
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return meta.current_details
