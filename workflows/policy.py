"""Tool policy: allow, deny or ask a person, decided before every tool call. Pure and deterministic.

Evaluated in the workflow (never in an activity), so no tool call can bypass it. Order: the
pinned Cedar policies, when the spec has any and one applies (:func:`decide`); else the tool's
rules (first whose condition holds), then the tool's own ``action``, then the agent's
``policy.default`` (``by_risk``: read tools allowed; write tools and sandboxed exec tools such as
``run_command`` need approval; other exec tools and network tools denied). Tools with ``risk``
exec or network are never allowed by ``by_risk`` without an explicit entry.

Patterns (``arg_matches``, ``arg_not_matches``) are matched by the engine the caller passes:
:func:`re2_search` (RE2: linear time in the argument's length, so no pattern can freeze the worker
by backtracking) for runs since patch ``policy-re2`` (workflows/tool_calls.py), :func:`re_search`
(Python's ``re``) for runs started before it, whose verdicts must replay unchanged. A rule whose
pattern the engine cannot compile (a spec pinned before patterns were checked at load) or whose
argument cannot be written as text denies the call, with a reason naming the rule: a broken rule,
whatever its action, never lets through more than a working one would, and the run goes on (the
model is told the call was denied) instead of failing its workflow task.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any, Literal, cast

from pydantic import BaseModel, Field

from activities import cedar_policy  # cedarpy itself loads at the first Cedar decision
from activities.contracts import ToolInfo
from activities.patterns import re2_found
from activities.spec import ArgCondition, Policy, ToolPolicy

Action = Literal["allow", "deny", "approve"]

Search = Callable[[str, str], bool]
"""``search(pattern, text)``: whether ``pattern`` occurs anywhere in ``text``; raises when the
engine cannot compile ``pattern``."""


class ConditionError(ValueError):
    """A rule's condition that cannot be evaluated: a pattern or argument it cannot read.

    The pattern does not compile, or the argument cannot be written as text. :func:`evaluate`
    denies the call instead of raising.
    """


def re2_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` (RE2 syntax) occurs in ``text``: linear time, no backtracking.

    Raises:
        activities.patterns.PatternError: ``pattern`` is not RE2 syntax (a backreference, a
            lookaround, unbalanced).
    """
    return re2_found(pattern, text)


def re_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` occurs in ``text`` by Python's ``re``: runs before patch ``policy-re2``.

    ``re`` backtracks: a pattern like ``^(a+)+$`` can take exponential time.

    Raises:
        re.error: ``pattern`` is not a valid Python regular expression.
    """
    return re.search(pattern, text) is not None


class PolicyDecision(BaseModel):
    """What the policy says of one tool call, why, and who may approve it."""

    action: Action
    reason: str
    approvers: list[str] = Field(default_factory=list)
    policy_id: str | None = None
    """Which policy decided: ``cedar:<id>``, ``tools.<name>.rules[<i>]``, ``tools.<name>``,
    ``default`` or ``by_risk`` (None: an unknown tool, which no policy decides)."""


def parse_arguments(arguments: str | dict[str, Any]) -> dict[str, Any] | None:
    """Arguments as a dict, or None when the model's JSON text is not an object.

    Text that is not JSON, or JSON nested deeper than the interpreter's recursion limit
    (``RecursionError`` from ``json.loads``), is None as well: never an exception.
    """
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        return None
    return cast("dict[str, Any]", value) if isinstance(value, dict) else None


def _normal_path(value: Any) -> str:
    text = str(value).replace("\\", "/").lstrip("./") if value is not None else ""
    return posixpath.normpath(text) if text else "."


def condition_holds(
    cond: ArgCondition,
    args: dict[str, Any] | None,
    tenant_id: str,
    principal_id: str,
    search: Search = re2_search,
) -> bool:
    """True when every field given in ``cond`` holds for these arguments and identity.

    ``search`` matches ``arg_matches`` / ``arg_not_matches`` (:func:`re2_search` or
    :func:`re_search`).

    Raises:
        ConditionError: a pattern ``search`` cannot compile, or an argument that cannot be
            written as JSON text (nested too deeply); the message names the argument.
    """
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
        if name not in a or not _found(search, name, pattern, a[name]):
            return False
    for name, pattern in (cond.arg_not_matches or {}).items():
        if name in a and _found(search, name, pattern, a[name]):
            return False
    return True


def _found(search: Search, name: str, pattern: str, value: Any) -> bool:
    """``search(pattern, text of value)``; every failure of it a :class:`ConditionError`."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return search(pattern, text)
    except (re.error, RecursionError, ValueError, TypeError) as e:  # PatternError is a ValueError
        raise ConditionError(f"argument {name!r}, pattern {pattern!r}: {e}") from None


def evaluate(
    policy: Policy,
    tool: ToolInfo | None,
    name: str,
    arguments: str | dict[str, Any],
    tenant_id: str,
    principal_id: str,
    search: Search = re2_search,
) -> PolicyDecision:
    """Decide one tool call (never raises: a rule that cannot be evaluated denies it).

    Args:
        policy: the agent's pinned policy.
        tool: the tool's pinned info, or None when the agent has no such tool (then ``allow``:
            the tool activity reports the unknown name to the model without running anything).
        name: the tool's name as the model wrote it.
        arguments: the model's arguments (raw JSON text or dict).
        tenant_id: the run's tenant.
        principal_id: the run's principal (who started it).
        search: the engine of ``arg_matches`` / ``arg_not_matches``: :func:`re2_search`, or
            :func:`re_search` for runs started before patch ``policy-re2``.
    """
    if tool is None:
        return PolicyDecision(action="allow", reason="unknown tool: reported to the model")
    entry = policy.tools.get(name)
    approvers = (
        list(entry.approvers) if entry and entry.approvers is not None else list(policy.approvers)
    )
    args = parse_arguments(arguments)
    if entry:
        by_rule = _by_rules(entry, name, args, (tenant_id, principal_id), search)
        if by_rule is not None:
            return by_rule.model_copy(update={"approvers": approvers})
        if entry.action:
            return PolicyDecision(
                action=entry.action,
                reason=entry.reason or f"{name}: {entry.action}",
                approvers=approvers,
                policy_id=f"tools.{name}",
            )
    if policy.default != "by_risk":
        return PolicyDecision(
            action=policy.default,
            reason=f"default policy: {policy.default}",
            approvers=approvers,
            policy_id="default",
        )
    by_risk: tuple[Action, str]
    if tool.risk == "read":
        by_risk = ("allow", "read-only tool")
    elif tool.risk == "write":
        by_risk = ("approve", "writes to the workspace")
    elif tool.risk == "exec" and getattr(tool, "sandboxed", False):
        by_risk = ("approve", "runs a command in the sandbox")
    else:
        by_risk = ("deny", f"{tool.risk} tools need an explicit policy entry")
    return PolicyDecision(
        action=by_risk[0], reason=by_risk[1], approvers=approvers, policy_id="by_risk"
    )


class CedarFacts(BaseModel):
    """What a Cedar decision reads besides the call: who acts, and the run when it asks.

    ``roles`` are the principal's roles from its identity (``RunRequest.roles``); those
    ``policy.roles`` names the principal in are added. ``now`` is workflow time (ISO-8601 UTC).
    """

    tenant_id: str
    principal_id: str
    roles: list[str] = Field(default_factory=list)
    agent: str = ""
    child: bool = False
    turn: int = 0
    tokens_used: int = 0
    cost_usd: float = 0.0
    budget_used_pct: int = 0
    now: str = ""


def decide(
    policy: Policy,
    tool: ToolInfo | None,
    call_id: str,
    name: str,
    arguments: str | dict[str, Any],
    facts: CedarFacts,
    search: Search = re2_search,
) -> PolicyDecision:
    """Decide one tool call: the pinned Cedar policies first, then :func:`evaluate`.

    Without ``policy.cedar`` (or for an unknown tool) this is :func:`evaluate`. With it, a Cedar
    policy that applies decides (``policy_id`` ``cedar:<id>``): forbid -> deny, ``@ask`` permit ->
    approve, permit -> allow; when none applies the rules decide. Never raises (Cedar errors deny).
    """
    cedar = policy.cedar
    if cedar is None or tool is None or cedar.policies is None or cedar.cedar_schema is None:
        return evaluate(policy, tool, name, arguments, facts.tenant_id, facts.principal_id, search)
    args = parse_arguments(arguments)
    roles = set(facts.roles) | {r for r, who in policy.roles.items() if facts.principal_id in who}
    when = _moment(facts.now)
    verdict = cedar_policy.decide(
        cedar.policies,
        cedar.cedar_schema,
        principal=(facts.principal_id, facts.tenant_id, facts.agent, facts.child),
        roles=sorted(roles),
        tool=name,
        call_id=call_id,
        call=cedar_policy.call_attributes(name, tool.risk, args, arguments),
        context=cedar_policy.CedarContext(
            turn=facts.turn,
            tokens_used=facts.tokens_used,
            cost_micro_usd=round(facts.cost_usd * 1_000_000),
            budget_used_pct=facts.budget_used_pct,
            risk=tool.risk,
            now=facts.now,
            hour_utc=when[0],
            weekday=when[1],
            tenant=facts.tenant_id,
        ),
    )
    if verdict is None:
        return evaluate(policy, tool, name, arguments, facts.tenant_id, facts.principal_id, search)
    entry = policy.tools.get(name)
    approvers = (
        list(entry.approvers) if entry and entry.approvers is not None else list(policy.approvers)
    )
    return PolicyDecision(
        action=verdict.action,
        reason=verdict.reason,
        approvers=approvers,
        policy_id=f"cedar:{verdict.policy_id}",
    )


def _moment(now: str) -> tuple[int, int]:
    """(hour 0-23, weekday 0-6) of an ISO-8601 time; (0, 0) when it is not one."""
    try:
        t = datetime.fromisoformat(now)
    except ValueError:
        return 0, 0
    return t.hour, t.weekday()


def _by_rules(
    entry: ToolPolicy,
    name: str,
    args: dict[str, Any] | None,
    who: tuple[str, str],
    search: Search,
) -> PolicyDecision | None:
    """The decision of the first of ``entry.rules`` whose condition holds, else None.

    A rule reached whose condition cannot be evaluated (:class:`ConditionError`) denies the call.
    """
    for i, rule in enumerate(entry.rules):
        try:
            holds = condition_holds(rule.when, args, who[0], who[1], search)
        except ConditionError as e:
            return PolicyDecision(
                action="deny",
                reason=f"{name}: rule {i + 1} cannot be evaluated ({e}); the call is denied",
                policy_id=f"tools.{name}.rules[{i}]",
            )
        if holds:
            return PolicyDecision(
                action=rule.action,
                reason=rule.reason or f"{name}: rule {i + 1}",
                policy_id=f"tools.{name}.rules[{i}]",
            )
    return None


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
