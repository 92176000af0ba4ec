"""Reading an agent out of a spec file (:func:`resolve_agent`) and hashing what a run pins (:func:`spec_hash`).

:mod:`activities.spec` re-exports every public name. The file itself is read by
:func:`activities.spec_file.load_spec_file`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from activities.cedar_policy import CedarError, check_policies, schema_for
from activities.contracts import ToolInfo
from activities.spec_agent import AgentSpec
from activities.spec_file import SpecError, load_spec_file
from activities.spec_policy import CHECK_PATTERNS, CedarPolicy
from activities.spec_settings import PlanSettings, RateLimit
from activities.subagents import AgentGraphError, check_agent_graph

__all__ = ["load_rate_limits", "pin_cedar", "resolve_agent", "spec_hash"]


def load_rate_limits(raw: dict[str, Any]) -> dict[str, RateLimit]:
    """The top-level ``rate_limits:`` of a spec file (model name -> :class:`RateLimit`).

    Raises:
        SpecError: the section is not a mapping of model names to ``{requests_per_second: R}``
            with ``R > 0``; the message names the field (``rate_limits.MODEL.requests_per_second``).
    """
    section = raw.get("rate_limits")
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise SpecError("rate_limits: must be a mapping of model name -> {requests_per_second: R}")
    out: dict[str, RateLimit] = {}
    for model, body in cast("dict[Any, Any]", section).items():
        if not isinstance(model, str) or not model.strip():
            raise SpecError(f"rate_limits: model names must be non-empty strings, got {model!r}")
        try:
            out[model] = RateLimit.model_validate(body)
        except ValidationError as e:
            raise SpecError(_format_error_at(f"rate_limits.{model}", e)) from None
    return out


def _expand(value: str, base: Path) -> str:
    p = Path(os.path.expandvars(os.path.expanduser(value)))
    if not p.is_absolute():
        p = base / p
    return str(p.resolve())


def _format_error_at(prefix: str, err: ValidationError) -> str:
    parts: list[str] = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        parts.append(f"{prefix}.{loc}: {e['msg']}" if loc else f"{prefix}: {e['msg']}")
    return "; ".join(parts)


def _with_cwd(entry: Any, base: Path) -> Any:
    """A command server's ``entry`` with its ``cwd`` made absolute; any other entry unchanged."""
    if not isinstance(entry, dict):
        return entry
    fields = cast("dict[str, Any]", entry)
    if fields.get("command") is None:
        return fields
    return {**fields, "cwd": _expand(str(fields.get("cwd") or "."), base)}


def _format_error(agent: str, err: ValidationError) -> str:
    return _format_error_at(f"agents.{agent}", err)


def resolve_agent(path: str | Path, agent: str, default_model: str) -> AgentSpec:
    """Resolve one agent of a spec file into an :class:`AgentSpec`.

    Args:
        path: the YAML spec file.
        agent: the agent's name under ``agents``.
        default_model: the model used when the agent names none (``AGENT_MODEL``).

    Raises:
        SpecError: unknown agent, or a field that does not validate (the message names it),
            or a top-level ``rate_limits`` that does not.
    """
    p = Path(path)
    raw = load_spec_file(p)
    agents = raw["agents"]
    if agent not in agents:
        raise SpecError(f"unknown agent {agent!r} in {p}; defined: {', '.join(sorted(agents))}")
    body = dict(agents[agent] or {})
    if "rate_limits" in body:
        raise SpecError(
            f"agents.{agent}.rate_limits: rate limits belong at the top level of the spec file "
            "(they hold for every agent, and workers read them there)"
        )
    body["rate_limits"] = load_rate_limits(raw)
    body.setdefault("model", default_model)
    body["name"] = agent
    if "workspace" in body:
        body["workspace"] = _expand(str(body["workspace"]), p.parent.resolve())
    else:
        body["workspace"] = str(p.parent.resolve())
    servers = body.get("mcp_servers")
    if isinstance(servers, dict):
        body["mcp_servers"] = {
            name: _with_cwd(entry, p.parent.resolve())
            for name, entry in cast("dict[Any, Any]", servers).items()
        }
    try:
        spec = AgentSpec.model_validate(body, context={CHECK_PATTERNS: True})
    except ValidationError as e:
        raise SpecError(_format_error(agent, e)) from None
    if spec.policy.cedar is not None:
        spec.policy.cedar = _read_cedar(spec.policy.cedar, p.parent.resolve(), agent)
    try:
        check_agent_graph(agents, agent)
    except AgentGraphError as e:
        raise SpecError(str(e)) from None
    return spec


def _read_cedar(cedar: CedarPolicy, base: Path, agent: str) -> CedarPolicy:
    """The policy file read (its path made absolute) and parsed; its text pinned.

    Raises:
        SpecError: the file cannot be read or does not parse (Cedar's message).
    """
    where = f"agents.{agent}.policy.cedar"
    path = Path(_expand(cedar.file, base))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{where}: cannot read {path}: {e}") from None
    try:
        check_policies(text)
    except CedarError as e:
        raise SpecError(f"{where} ({path}): {e}") from None
    return CedarPolicy(file=str(path), policies=text)


def pin_cedar(spec: AgentSpec, tools: list[ToolInfo]) -> None:
    """Validate the spec's Cedar policies against the schema of its ``tools``; pin the schema.

    Raises:
        SpecError: a policy does not validate (Cedar's message names it).
    """
    cedar = spec.policy.cedar
    if cedar is None or cedar.policies is None:
        return
    schema = schema_for(tools)
    try:
        check_policies(cedar.policies, schema)
    except CedarError as e:
        raise SpecError(f"agents.{spec.name}.policy.cedar ({cedar.file}): {e}") from None
    cedar.cedar_schema = schema


def spec_hash(spec: AgentSpec, tools: list[ToolInfo]) -> str:
    """sha256 (hex) of the canonical JSON of the resolved spec and its tool schemas."""
    blob = json.dumps(
        {
            "spec": _without_defaults(spec.model_dump(mode="json"), _NEW_SPEC_DEFAULTS),
            "tools": [
                _without_defaults(t.model_dump(mode="json"), _NEW_TOOL_DEFAULTS) for t in tools
            ],
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()


_NEW_SPEC_DEFAULTS: dict[str, Any] = {
    "description": None,
    "subagents": [],
    "handoffs": [],
    "mode": "task",
    "plan": PlanSettings().model_dump(mode="json"),
    "code_mode": None,
    "local_tools_in_model_step": True,
    "guardrails": None,
}
_NEW_TOOL_DEFAULTS: dict[str, Any] = {"agent": None, "kind": "tool"}


_NEW_NESTED_DEFAULTS: dict[str, dict[str, Any]] = {
    "limits": {"max_sandbox_seconds": None},
    "pricing": {"sandbox_per_second": 0.0, "cached_prompt_per_mtok": None},
    "policy": {"cedar": None, "judge": None},
}


def _without_defaults(dumped: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``dumped`` without the fields added later that hold their defaults (hashes stay stable).

    Fields added later inside ``limits`` and ``pricing`` are dropped the same way.
    """
    out = {k: v for k, v in dumped.items() if k not in defaults or defaults[k] != v}
    for key, nested in _NEW_NESTED_DEFAULTS.items():
        if isinstance(out.get(key), dict):
            out[key] = _without_defaults(out[key], nested)
    return out
