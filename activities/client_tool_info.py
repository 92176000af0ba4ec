"""A client tool as the run pins it (:class:`activities.contracts.ToolInfo` of ``kind="client"``).

Apart from :mod:`activities.client_tools` because :mod:`activities.contracts` imports that one.
"""

from __future__ import annotations

from activities.client_tools import ClientToolDef
from activities.contracts import ToolInfo

__all__ = ["client_tool_info"]


def client_tool_info(d: ClientToolDef) -> ToolInfo:
    """A client tool as the run pins it: ``kind="client"``, one attempt, risk ``read``.

    Policy and approvals apply as for any tool (a policy entry of its name may ask for approval
    or deny it).
    """
    return ToolInfo(
        name=d.name,
        description=d.description,
        parameters=d.parameters,
        timeout_seconds=d.timeout_seconds,
        max_attempts=1,
        kind="client",
    )
