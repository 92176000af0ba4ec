"""Local activities with the failures of activities: one ``ActivityError`` to catch.

A local activity's failure can reach the workflow unwrapped (the ``ApplicationError`` the
activity raised, seen here with ``spec.resolve`` under temporalio 1.35), where an activity's always
arrives as an ``ActivityError`` whose ``cause`` is that error. The callers of ``AgentRun`` read
``e.cause`` of an ``ActivityError`` (invalid spec, MCP server unavailable, a tool that timed out),
so :func:`execute_local` wraps the first form into the second.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, FailureError


async def execute_local(activity: Any, arg: Any, **options: Any) -> Any:
    """``workflow.execute_local_activity(activity, arg, **options)``; returns its result.

    Raises:
        ActivityError: the local activity failed (its ``cause`` is the activity's own error).
    """
    try:
        return await workflow.execute_local_activity(activity, arg, **options)
    except ActivityError:
        raise
    except FailureError as e:
        name = getattr(activity, "__temporal_activity_definition", None)
        wrapped = ActivityError(
            str(e),
            scheduled_event_id=0,
            started_event_id=0,
            identity="",
            activity_type=getattr(name, "name", None) or str(activity),
            activity_id="",
            retry_state=None,
        )
        raise wrapped from e
