"""Tool policy: allow, deny or ask a person, decided before every tool call. Pure and deterministic.

Evaluated in the workflow (never in an activity), so no tool call can bypass it. Order:
the tool's rules (first whose condition holds), then the tool's own ``action``, then the agent's
``policy.default`` (``by_risk``: read tools allowed, write/exec/network tools need approval).
Tools with ``risk`` exec or network are never allowed by ``by_risk`` without an explicit entry.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Collection
from typing import Any, Literal, cast

from pydantic import BaseModel, Field

from activities.contracts import ToolInfo
from activities.spec import ArgCondition, Policy

Action = Literal["allow", "deny", "approve"]


class PolicyDecision(BaseModel):
    """What the policy says of one tool call, why, and who may approve it."""

    action: Action
    reason: str
    approvers: list[str] = Field(default_factory=list)


def parse_arguments(arguments: str | dict[str, Any]) -> dict[str, Any] | None:
    """Arguments as a dict, or None when the model's JSON text is not an object."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return None
    return cast("dict[str, Any]", value) if isinstance(value, dict) else None


def _normal_path(value: Any) -> str:
    text = str(value).replace("\\", "/").lstrip("./") if value is not None else ""
    return posixpath.normpath(text) if text else "."


def condition_holds(
    cond: ArgCondition, args: dict[str, Any] | None, tenant_id: str, principal_id: str
) -> bool:
    """True when every field given in ``cond`` holds for these arguments and identity."""
    a = args or {}
    if cond.tenant_in is not None and tenant_id not in cond.tenant_in:
        return False
    if cond.principal_in is not None and principal_id not in cond.principal_in:
        return False
    if cond.path_prefix is not None:
        if "path" not in a:
            return False
        path = _normal_path(a["path"])
        prefix = _normal_path(cond.path_prefix)
        if path.startswith("..") or not (
            path == prefix or path.startswith(prefix.rstrip("/") + "/")
        ):
            return False
    for name, pattern in (cond.arg_matches or {}).items():
        if name not in a or re.search(pattern, _text(a[name])) is None:
            return False
    for name, pattern in (cond.arg_not_matches or {}).items():
        if name in a and re.search(pattern, _text(a[name])) is not None:
            return False
    return True


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def evaluate(
    policy: Policy,
    tool: ToolInfo | None,
    name: str,
    arguments: str | dict[str, Any],
    tenant_id: str,
    principal_id: str,
) -> PolicyDecision:
    """Decide one tool call.

    Args:
        policy: the agent's pinned policy.
        tool: the tool's pinned info, or None when the agent has no such tool (then ``allow``:
            the tool activity reports the unknown name to the model without running anything).
        name: the tool's name as the model wrote it.
        arguments: the model's arguments (raw JSON text or dict).
        tenant_id: the run's tenant.
        principal_id: the run's principal (who started it).
    """
    if tool is None:
        return PolicyDecision(action="allow", reason="unknown tool: reported to the model")
    entry = policy.tools.get(name)
    approvers = (
        list(entry.approvers) if entry and entry.approvers is not None else list(policy.approvers)
    )
    args = parse_arguments(arguments)
    if entry:
        for i, rule in enumerate(entry.rules):
            if condition_holds(rule.when, args, tenant_id, principal_id):
                return PolicyDecision(
                    action=rule.action,
                    reason=rule.reason or f"{name}: rule {i + 1}",
                    approvers=approvers,
                )
        if entry.action:
            return PolicyDecision(
                action=entry.action,
                reason=entry.reason or f"{name}: {entry.action}",
                approvers=approvers,
            )
    if policy.default != "by_risk":
        return PolicyDecision(
            action=policy.default, reason=f"default policy: {policy.default}", approvers=approvers
        )
    if tool.risk == "read":
        return PolicyDecision(action="allow", reason="read-only tool", approvers=approvers)
    if tool.risk == "write":
        return PolicyDecision(
            action="approve", reason="writes to the workspace", approvers=approvers
        )
    if tool.risk == "exec" and getattr(tool, "sandboxed", False):
        return PolicyDecision(
            action="approve", reason="runs a command in the sandbox", approvers=approvers
        )
    return PolicyDecision(
        action="deny",
        reason=f"{tool.risk} tools need an explicit policy entry",
        approvers=approvers,
    )


def may_decide(
    policy: Policy, approvers: list[str], principal_id: str, roles: Collection[str] = ()
) -> tuple[bool, str]:
    """Whether ``principal_id`` may decide an approval whose approvers are ``approvers``.

    Approvers are principal ids or ``role:NAME``: held by the principals ``policy.roles[NAME]``
    lists, and by a decider whose ``roles`` (from their identity provider's claims, carried by
    the decision) name it. An empty list lets anyone decide. Returns ``(allowed, reason)``.
    """
    if not approvers:
        return True, "no approvers configured: anyone may decide"
    for entry in approvers:
        if entry.startswith("role:"):
            role = entry[5:]
            if principal_id in policy.roles.get(role, []):
                return True, f"holds role {role}"
            if role in roles:
                return True, f"holds role {role} (identity claims)"
        elif entry == principal_id:
            return True, "named approver"
    return False, f"principal {principal_id!r} is not among the approvers {approvers}"
