"""Cedar policies for tool calls: the schema, what a call names, and the decision (docs/policy.md).

A spec's ``policy: {cedar: FILE}`` names a file of Cedar policies (https://www.cedarpolicy.com),
evaluated by ``cedarpy`` (the Cedar engine's Python binding, a native library). Each tool call is
one authorization request:

* **principal** ``Principal::"<principal_id>"``: who the run acts for, member of its
  ``Role::"<name>"`` entities (the roles the identity gave the run, ``RunRequest.roles``, and those
  ``policy.roles`` names it in) and of ``Tenant::"<tenant_id>"``; attributes ``tenant``, ``agent``
  (the agent acting) and ``child`` (the run is a child run: an agent acting for another).
* **action** ``Action::"<tool name>"``, member of ``Action::"risk:<read|write|exec|network>"``.
* **resource** ``Call::"<tool_call_id>"``: what the arguments name (:func:`call_attributes`).
* **context** the run when the call is asked for (:class:`CedarContext`).

Policies decide ``allow`` (a ``permit`` held), ``ask`` (a ``permit`` annotated ``@ask`` held)
or ``deny`` (a ``forbid`` held: forbid wins, as always in Cedar); when none applies, the spec's
other rules decide. ``@id("name")`` names a policy in the decision (else Cedar's ``policyN``).

Everything here is pure and deterministic for the same inputs: the workflow calls :func:`decide`
(cedarpy imported lazily, passed through the sandbox; docs/policy.md gives the measurements).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from activities.contracts import ToolInfo

__all__ = [
    "ASK_ANNOTATION",
    "RISKS",
    "CedarContext",
    "CedarError",
    "CedarVerdict",
    "call_attributes",
    "check_policies",
    "decide",
    "policy_names",
    "schema_for",
]

RISKS = ("read", "write", "exec", "network")
ASK_ANNOTATION = "ask"
"""A ``permit`` annotated ``@ask`` (any value) asks a person (or the judge) instead of allowing."""

PATH_KEYS = frozenset(
    {"path", "paths", "file", "files", "filename", "dir", "directory", "src", "source", "dst",
     "dest", "destination", "cwd", "target"}
)  # fmt: skip
HOST_KEYS = frozenset({"url", "urls", "host", "hostname", "uri", "endpoint", "domain"})
COMMAND_KEYS = frozenset({"command", "cmd", "commands", "script", "shell", "argv"})
MAX_TEXT_CHARS = 8_000
"""Characters of the arguments' JSON text given as ``resource.arguments`` at most."""


class CedarError(ValueError):
    """A policy file that does not parse or does not validate against the schema (Cedar's words)."""


@dataclass(frozen=True)
class CedarContext:
    """The context of one request (``context`` in a policy); every field is deterministic data.

    ``now`` is workflow time (ISO-8601 UTC), ``hour_utc`` 0-23, ``weekday`` 0 (Monday) to 6;
    ``budget_used_pct`` is the larger share (0-100+) of the run's token and cost budgets used
    (0 without a budget); ``cost_micro_usd`` the run's cost so far in millionths of a dollar.
    """

    turn: int
    tokens_used: int
    cost_micro_usd: int
    budget_used_pct: int
    risk: str
    now: str
    hour_utc: int
    weekday: int
    tenant: str

    def as_dict(self) -> dict[str, Any]:
        """The context record Cedar reads."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class CedarVerdict:
    """What the Cedar policies decided: ``allow``, ``approve`` (asked) or ``deny``; who decided."""

    action: Literal["allow", "deny", "approve"]
    policy_id: str
    reason: str


_LONG: dict[str, str] = {"type": "Long"}
_STR: dict[str, str] = {"type": "String"}
_BOOL: dict[str, str] = {"type": "Boolean"}
_STRS: dict[str, Any] = {"type": "Set", "element": {"type": "String"}}

CONTEXT_ATTRIBUTES: dict[str, dict[str, Any]] = {
    "turn": _LONG, "tokens_used": _LONG, "cost_micro_usd": _LONG, "budget_used_pct": _LONG,
    "risk": _STR, "now": _STR, "hour_utc": _LONG, "weekday": _LONG, "tenant": _STR,
}  # fmt: skip
CALL_ATTRIBUTES: dict[str, dict[str, Any]] = {
    "tool": _STR, "risk": _STR, "path": _STR, "paths": _STRS, "outside_workspace": _BOOL,
    "host": _STR, "hosts": _STRS, "command": _STR, "commands": _STRS, "programs": _STRS,
    "arguments": _STR,
}  # fmt: skip
PRINCIPAL_ATTRIBUTES: dict[str, dict[str, Any]] = {"tenant": _STR, "agent": _STR, "child": _BOOL}


def _record(attrs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"type": "Record", "attributes": {k: {**v, "required": True} for k, v in attrs.items()}}


def schema_for(tools: list[ToolInfo]) -> str:
    """The Cedar schema (JSON text) of an agent whose tools are ``tools``: one action per tool.

    Deterministic (sorted keys); pinned into the run with the policies.
    """
    applies = {
        "principalTypes": ["Principal"],
        "resourceTypes": ["Call"],
        "context": _record(CONTEXT_ATTRIBUTES),
    }
    actions: dict[str, Any] = {f"risk:{r}": {} for r in RISKS}
    for t in tools:
        actions[t.name] = {"memberOf": [{"id": f"risk:{t.risk}"}], "appliesTo": applies}
    schema = {
        "": {
            "entityTypes": {
                "Role": {},
                "Tenant": {},
                "Principal": {
                    "memberOfTypes": ["Role", "Tenant"],
                    "shape": _record(PRINCIPAL_ATTRIBUTES),
                },
                "Call": {"shape": _record(CALL_ATTRIBUTES)},
            },
            "actions": actions,
        }
    }
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def _cedarpy() -> Any:
    import cedarpy  # a native library: loaded where policies are checked or decided

    return cedarpy


def check_policies(text: str, schema: str | None = None) -> None:
    """Parse ``text`` as Cedar policies and, given a ``schema``, validate them against it.

    Raises:
        CedarError: Cedar's own message (the parse error, or each validation error).
    """
    cedarpy = _cedarpy()
    try:
        cedarpy.policies_to_json_str(text)
    except Exception as e:  # noqa: BLE001 - cedarpy raises ValueError or its own errors
        raise CedarError(f"Cedar policies do not parse: {e}") from None
    if schema is None:
        return
    result = cedarpy.validate_policies(text, schema)
    if not result.validation_passed:
        errors = "; ".join(str(e) for e in result.errors) or "no reason given"
        raise CedarError(f"Cedar policies do not validate against the schema: {errors}")


@lru_cache(maxsize=64)
def _parsed(text: str, schema: str) -> tuple[Any, Any, dict[str, tuple[str, bool]]]:
    """The policy set, schema handles and policy names of pinned texts, parsed once per process.

    A pure function of its arguments (the handles are read-only): a run's decisions do not
    depend on what was cached before. Parsing is most of a decision's time (``make bench``
    scenario ``judge``: about 6 ms with the texts, under 1 ms with the handles).
    """
    cedarpy = _cedarpy()
    return (
        cedarpy.PolicySet.from_str(text),
        cedarpy.Schema.from_json_str(schema),
        policy_names(text),
    )


def policy_names(text: str) -> dict[str, tuple[str, bool]]:
    """Cedar's policy id (``policy0``...) -> (the name it is shown by, whether it is ``@ask``).

    The name is the ``@id("...")`` annotation when given, else Cedar's id.

    Raises:
        CedarError: the text does not parse.
    """
    try:
        parsed = json.loads(_cedarpy().policies_to_json_str(text))
    except Exception as e:  # noqa: BLE001
        raise CedarError(f"Cedar policies do not parse: {e}") from None
    out: dict[str, tuple[str, bool]] = {}
    for pid, body in cast("dict[str, Any]", parsed.get("staticPolicies") or {}).items():
        notes = cast("dict[str, Any]", body.get("annotations") or {})
        out[pid] = (str(notes.get("id") or pid), ASK_ANNOTATION in notes)
    return out


def _normal(path: str) -> str:
    text = path.replace("\\", "/").strip()
    return posixpath.normpath(text) if text else ""


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v if isinstance(v, str) else json.dumps(v) for v in cast("list[Any]", value)]
    return [] if value is None else [json.dumps(value, sort_keys=True, default=str)]


def _host(value: str) -> str:
    parts = urlsplit(value if "//" in value else f"//{value}")
    return (parts.hostname or "").lower()


def call_attributes(
    tool: str, risk: str, args: dict[str, Any] | None, raw: str | dict[str, Any]
) -> dict[str, Any]:
    """The resource of a call: what its arguments name.

    ``paths`` (normalised, ``..`` kept: ``outside_workspace`` is true when one leaves the
    workspace or is absolute) from arguments named like a path (``path``, ``file``, ``dir``,
    ``src``, ``dst``, ...); ``hosts`` (lower-case host names) from ``url``, ``host``,
    ``endpoint``...; ``commands`` from ``command``, ``cmd``, ``script``, ``argv``... and
    ``programs``, each command's first word without its folder. ``path``, ``host`` and
    ``command`` are the first of each ("" when none: Cedar has no quantifier over a set, so a
    pattern (``like``) is matched on these); ``arguments`` is the arguments' JSON text (at most
    :data:`MAX_TEXT_CHARS`).
    """
    a = args or {}
    paths = [_normal(p) for k, v in a.items() if k in PATH_KEYS for p in _strings(v)]
    paths = [p for p in paths if p]
    hosts = [h for k, v in a.items() if k in HOST_KEYS for x in _strings(v) if (h := _host(x))]
    commands: list[str] = []
    for k, v in a.items():
        if k == "argv" and isinstance(v, list):
            commands.append(" ".join(_strings(v)))
        elif k in COMMAND_KEYS:
            commands += _strings(v)
    programs = sorted({posixpath.basename(c.split()[0]) for c in commands if c.split()})
    text = raw if isinstance(raw, str) else json.dumps(raw, sort_keys=True, default=str)
    return {
        "tool": tool,
        "risk": risk,
        "path": paths[0] if paths else "",
        "paths": sorted(set(paths)),
        "outside_workspace": any(p == ".." or p.startswith(("../", "/")) for p in paths),
        "host": hosts[0] if hosts else "",
        "hosts": sorted(set(hosts)),
        "command": commands[0] if commands else "",
        "commands": sorted(set(commands)),
        "programs": programs,
        "arguments": text[:MAX_TEXT_CHARS],
    }


def _entities(
    principal: tuple[str, str, str, bool], roles: list[str], call_id: str, call: dict[str, Any]
) -> list[dict[str, Any]]:
    principal_id, tenant, agent, child = principal
    return [
        {
            "uid": {"type": "Principal", "id": principal_id},
            "attrs": {"tenant": tenant, "agent": agent, "child": child},
            "parents": [{"type": "Role", "id": r} for r in roles]
            + [{"type": "Tenant", "id": tenant}],
        },
        *({"uid": {"type": "Role", "id": r}, "attrs": {}, "parents": []} for r in roles),
        {"uid": {"type": "Tenant", "id": tenant}, "attrs": {}, "parents": []},
        {"uid": {"type": "Call", "id": call_id}, "attrs": call, "parents": []},
    ]


def decide(
    policies: str,
    schema: str,
    *,
    principal: tuple[str, str, str, bool],
    roles: list[str],
    tool: str,
    call_id: str,
    call: dict[str, Any],
    context: CedarContext,
) -> CedarVerdict | None:
    """Decide one tool call by the pinned Cedar ``policies`` (None: no policy applies).

    Args:
        policies: the pinned policy text.
        schema: the pinned schema (:func:`schema_for`); the request is checked against it.
        principal: ``(principal_id, tenant_id, agent, child)``.
        roles: the principal's roles (sorted, distinct).
        tool: the tool's name (the action).
        call_id: the tool call's id (the resource's id).
        call: :func:`call_attributes` of the call.
        context: :class:`CedarContext`.

    Never raises over what a model sends: an evaluation error (a policy reading something that
    is not there, a request the schema refuses) denies the call, naming the policy.
    """
    cedarpy = _cedarpy()
    request = {
        "principal": {"type": "Principal", "id": principal[0]},
        "action": {"type": "Action", "id": tool},
        "resource": {"type": "Call", "id": call_id},
        "context": context.as_dict(),
    }
    try:
        policy_set, schema_handle, names = _parsed(policies, schema)
        result = cedarpy.is_authorized(
            request, policy_set, _entities(principal, roles, call_id, call), schema_handle
        )
    except Exception as e:  # noqa: BLE001 - a request Cedar refuses: never more than a deny
        return CedarVerdict("deny", "cedar", f"Cedar could not evaluate the call ({e})")
    diagnostics = result.diagnostics
    errors = [str(e) for e in (diagnostics.errors or [])]
    reasons = sorted(names.get(str(p), (str(p), False)) for p in (diagnostics.reasons or []))
    if errors:
        return CedarVerdict(
            "deny", "cedar", f"a Cedar policy could not be evaluated: {'; '.join(errors)}"
        )
    if not reasons:
        return None
    ids = ", ".join(n for n, _ in reasons)
    if not result.allowed:
        return CedarVerdict("deny", ids, f"forbidden by Cedar policy {ids}")
    asked = [n for n, ask in reasons if ask]
    if asked:
        return CedarVerdict("approve", ", ".join(asked), f"Cedar policy {', '.join(asked)} asks")
    return CedarVerdict("allow", ids, f"permitted by Cedar policy {ids}")
