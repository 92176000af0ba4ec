"""Agent specs: the YAML file that defines agents, its validation, and its pinned, hashed form.

A spec file looks like::

    tool_modules: [my_company.tools]      # optional: modules whose @tool functions to register
    rate_limits:                          # optional: per model, held across all workers
      gpt-4o-mini: {requests_per_second: 5}
    agents:
      default:
        model: qwen2.5-coder-1.5b-instruct  # optional: AGENT_MODEL when absent; a list = fallbacks
        system_prompt: You are ...
        tools: [list_files, read_file, search_files, calculator]
        workspace: ./workspace              # relative to the spec file; ~ and $VARS expanded
        limits: {max_turns: 20, max_seconds: 300}
        policy:
          default: allow
          tools:
            write_file:
              action: approve
              approvers: [alice, role:reviewer]
              rules:
                - {when: {path_prefix: drafts/}, action: allow}

The spec is read once, when a run starts, by the ``spec.resolve`` activity; the workflow keeps the
resolved :class:`AgentSpec` and its sha256 (:class:`PinnedSpec`), so editing the file never changes a
run in flight.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from activities.contracts import ToolInfo
from activities.mcp.config import McpServerSpec, check_server_name, tool_name
from activities.signing import parse_public_key
from activities.spec_file import SpecError, load_spec_file  # noqa: F401 - also imported from here
from activities.subagents import AgentGraphError, check_agent_graph

PolicyAction = Literal["allow", "deny", "approve"]
AGENT_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,48}")
"""Agent names that may follow ``ask_`` / ``handoff_to_`` in a tool name (OpenAI: 64 chars)."""


class Limits(BaseModel):
    """Per-run limits. Seconds are measured on workflow time (``workflow.now()``)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=20, ge=1, description="model steps at most")
    max_seconds: float = Field(
        default=300, gt=0, description="wall seconds of workflow time at most"
    )
    loop_window: int = Field(
        default=6, ge=2, description="recent turns examined for repeated tool calls"
    )
    loop_repeats: int = Field(
        default=3, ge=2, description="identical turns within the window that make a loop"
    )
    max_total_tokens: int | None = Field(default=None, ge=1, description="token budget of the run")
    max_cost_usd: float | None = Field(
        default=None, gt=0, description="cost budget of the run, US dollars"
    )
    max_sandbox_seconds: float | None = Field(
        default=None,
        gt=0,
        description="sandbox budget: seconds of sandboxed tool time (run_python, run_command)",
    )
    on_budget: Literal["stop", "pause"] = "stop"
    continue_as_new_every_turns: int | None = Field(
        default=None, ge=1, description="continue as new every N turns (None: by history size)"
    )
    continue_as_new_at_bytes: int = Field(
        default=2 * 1024 * 1024,
        ge=1024,
        description="continue as new at a turn boundary once the history reaches this many bytes "
        "(or when Temporal suggests it, at 4 MiB / 4,096 events; docs/temporal-facts.md)",
    )
    continue_as_new_at_events: int = Field(
        default=2_000, ge=100, description="the same, in history events"
    )


class ArgCondition(BaseModel):
    """A condition over a tool call's arguments and the run's identity. All given fields must hold."""

    model_config = ConfigDict(extra="forbid")

    path_prefix: str | None = Field(
        default=None, description="argument `path` starts with this (workspace-relative)"
    )
    arg_matches: dict[str, str] | None = Field(
        default=None,
        description="argument name -> regular expression the argument's text must match (re.search)",
    )
    arg_not_matches: dict[str, str] | None = Field(
        default=None,
        description="argument name -> regular expression the argument's text must not match",
    )
    tenant_in: list[str] | None = None
    principal_in: list[str] | None = None


class PolicyRule(BaseModel):
    """``when`` holds -> ``action``. Rules are tried in order; the first that holds decides."""

    model_config = ConfigDict(extra="forbid")

    when: ArgCondition
    action: PolicyAction
    reason: str | None = None


class ToolPolicy(BaseModel):
    """Policy of one tool: its default action, rules over arguments, who may approve."""

    model_config = ConfigDict(extra="forbid")

    action: PolicyAction | None = None
    rules: list[PolicyRule] = Field(default_factory=list[PolicyRule])
    approvers: list[str] | None = None
    reason: str | None = None


class Policy(BaseModel):
    """Tool policy of an agent.

    ``default`` applies to tools without an entry: ``by_risk`` means read tools are allowed and
    write/exec/network tools need approval. ``approvers`` lists principals (``alice``) or roles
    (``role:reviewer``) that may decide approvals; an empty list means any principal may decide.
    A tool's own ``approvers`` replaces this list for that tool.
    ``approval_timeout_seconds`` is a durable timer; when it fires the pending call is settled by
    ``on_approval_timeout``.
    """

    model_config = ConfigDict(extra="forbid")

    default: PolicyAction | Literal["by_risk"] = "by_risk"
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    approvers: list[str] = Field(default_factory=list)
    roles: dict[str, list[str]] = Field(
        default_factory=dict, description="role name -> principals holding it"
    )
    approval_timeout_seconds: float = Field(default=86_400, gt=0)
    on_approval_timeout: Literal["reject", "fail"] = "reject"
    require_signed_decisions: bool = Field(
        default=False,
        description="approve/reject/decide must carry an Ed25519 signature verified against "
        "decision_keys (activities/signing.py); unsigned or badly signed ones are refused",
    )
    decision_keys: list[str] = Field(
        default_factory=list,
        description="base64 raw Ed25519 public keys whose signatures decisions may carry "
        "(`agentctl decision-key` prints the local one); pinned at run start",
    )

    @model_validator(mode="after")
    def _keys_when_required(self) -> Policy:
        """Signed decisions need at least one valid key."""
        for k in self.decision_keys:
            parse_public_key(k)
        if self.require_signed_decisions and not self.decision_keys:
            raise ValueError("policy.require_signed_decisions needs policy.decision_keys")
        return self


class Pricing(BaseModel):
    """Price of the model in US dollars per million tokens (0 for a local model)."""

    model_config = ConfigDict(extra="forbid")

    prompt_per_mtok: float = 0.0
    completion_per_mtok: float = 0.0
    sandbox_per_second: float = Field(
        default=0.0, ge=0, description="US dollars per second of sandboxed tool time"
    )


class MemorySpec(BaseModel):
    """``memory:`` of an agent (docs/memory.md).

    Scopes: ``user`` (the run's principal), ``agent`` (this agent's name), ``thread`` (this run's
    workflow id); the tenant is always the run's own.
    """

    model_config = ConfigDict(extra="forbid")

    read: list[Literal["user", "agent", "thread"]] = Field(
        default_factory=list[Literal["user", "agent", "thread"]]
    )
    write: list[Literal["user", "agent", "thread"]] = Field(
        default_factory=list[Literal["user", "agent", "thread"]]
    )
    max_tokens: int = Field(
        default=800, ge=50, le=8000, description="memory block size per model step"
    )
    limit: int = Field(default=8, ge=1, le=50, description="items retrieved per model step")
    consolidate_after_seconds: float = Field(
        default=5.0, ge=0, description="debounce of the consolidation workflow after a run ends"
    )


class CodeModeSpec(BaseModel):
    """``code_mode:`` of an agent: one tool taking a Python script over the listed tools.

    See activities/code_mode.py, workflows/code_mode.py and docs/sandbox.md "Code Mode".
    """

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(
        default="run_code",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$",
        description="the Code Mode tool's name",
    )
    tools: list[str] = Field(
        min_length=1, description="the agent's tools the script may call (host functions)"
    )
    max_calls: int = Field(default=50, ge=1, le=1000, description="tool calls per script")
    step_seconds: float = Field(
        default=2.0, gt=0, le=60, description="execution seconds between two tool round trips"
    )
    max_memory_mb: int = Field(default=64, ge=8, le=1024, description="the interpreter's heap")


class Compaction(BaseModel):
    """Context-window settings, in tokens. ``threshold`` is a fraction of the usable window."""

    model_config = ConfigDict(extra="forbid")

    context_window: int = Field(default=32_768, ge=256)
    output_reserve: int = Field(default=1024, ge=0)
    threshold: float = Field(default=0.8, gt=0, le=1)
    summarize: bool = False
    encoding: str | None = None


class PlanSettings(BaseModel):
    """Settings of ``mode: plan`` (plan -> act -> observe -> replan; workflows/plan.py)."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(default=8, ge=1, le=50, description="steps one plan may hold at most")
    max_replans: int = Field(
        default=1, ge=0, le=10, description="new plans after a failed step at most"
    )
    max_invalid_plans: int = Field(
        default=2, ge=0, description="invalid plans told back to the model before the run fails"
    )


class RateLimit(BaseModel):
    """A model's rate limit, held across every worker by Temporal's server-side task-queue limit."""

    model_config = ConfigDict(extra="forbid")

    requests_per_second: float = Field(
        gt=0, description="model activities the server dispatches per second, at most"
    )


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


class ToolEntry(BaseModel):
    """A ``tools:`` entry written as a mapping: the tool and the task queue its calls run on."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="the tool's registered name")
    task_queue: str | None = Field(
        default=None,
        min_length=1,
        pattern=r"^\S+$",
        description="the task queue its calls run on (a tools-only worker polls it)",
    )
    local: bool | None = Field(
        default=None,
        description="run its calls as local activities (true) or activities (false); unset: "
        "the tool's own default (@tool(local=True): calculator, read_file, list_files, "
        "search_files); ignored with task_queue (docs/throughput.md)",
    )


class AgentSpec(BaseModel):
    """One agent, resolved: every default filled, the workspace made absolute.

    ``tools`` holds names once validated; an entry ``{name: N, task_queue: Q}`` moves its queue
    to ``tool_queues`` (tool name -> queue). ``model`` may be given as a list: its first name
    becomes ``model`` (the primary) and the others ``fallback_models``, tried in order when a
    model step's error is not retryable or its retries are exhausted. ``rate_limits`` is the
    spec file's top-level section (model -> :class:`RateLimit`): a model named there runs its
    steps on its own task queue (:func:`activities.contracts.model_task_queue`). ``mcp_servers`` maps a server's name to its
    :class:`McpServerSpec`; policy entries may name its tools ``server.tool`` or ``server__tool``.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    model: str = Field(min_length=1)
    fallback_models: list[str] = Field(
        default_factory=list, description="models tried in order when a model step fails for good"
    )
    rate_limits: dict[str, RateLimit] = Field(
        default_factory=dict, description="the spec file's rate_limits (model -> limit)"
    )
    system_prompt: str = "You are a helpful assistant."
    tools: list[str | ToolEntry] = Field(default_factory=list[str | ToolEntry])
    tool_queues: dict[str, str] = Field(default_factory=dict)
    local_tools: dict[str, bool] = Field(
        default_factory=dict,
        description="tool name -> run as a local activity (from tools entries with local:)",
    )
    mcp_servers: dict[str, McpServerSpec] = Field(default_factory=dict)
    workspace: str = "."
    limits: Limits = Field(default_factory=Limits)
    policy: Policy = Field(default_factory=Policy)
    pricing: Pricing = Field(default_factory=Pricing)
    compaction: Compaction = Field(default_factory=Compaction)
    memory: MemorySpec | None = None
    code_mode: CodeModeSpec | None = Field(
        default=None, description="a tool that runs a Python script over the agent's tools"
    )
    temperature: float = Field(default=0.2, ge=0, le=2)
    retry_temperature_step: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="added to the temperature only on the attempt after unreadable model output "
        "(0, the default: every retry of a model step sends the same request)",
    )
    max_output_tokens: int = Field(default=1024, ge=1)
    model_timeout_seconds: float = Field(
        default=120, gt=0, description="start-to-close of one model attempt"
    )
    model_max_attempts: int = Field(
        default=8, ge=1, description="attempts of one model step (Temporal retries)"
    )
    max_parse_failures: int = Field(
        default=2,
        ge=0,
        description="unparsable model outputs reported back to the model before the run fails",
    )
    max_tool_output_chars: int = Field(default=16_000, ge=100)
    idle_timeout_seconds: float = Field(
        default=3600, gt=0, description="chat mode: wait this long for a message"
    )
    secrets: list[str] = Field(
        default_factory=list, description="environment variables whose values are secret"
    )
    description: str | None = Field(
        default=None,
        description="what the agent does, shown to agents that may ask it or hand off to it",
    )
    subagents: list[str] = Field(
        default_factory=list, description="agents this one may ask (tools ask_<NAME>)"
    )
    handoffs: list[str] = Field(
        default_factory=list, description="agents this one may hand the run to (handoff_to_<NAME>)"
    )
    mode: Literal["task", "plan"] = Field(
        default="task", description="plan: plan -> act -> observe -> replan (workflows/plan.py)"
    )
    plan: PlanSettings = Field(default_factory=PlanSettings)

    @field_validator("subagents", "handoffs")
    @classmethod
    def _agent_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not AGENT_TOOL_NAME.fullmatch(name):
                raise ValueError(
                    f"{name!r} cannot name a tool: use letters, digits, _ and - (at most 48)"
                )
        if len(set(v)) != len(v):
            raise ValueError("names must be unique")
        return v

    @model_validator(mode="before")
    @classmethod
    def _split_model_list(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cast("dict[str, Any]", data)
        if not isinstance(fields.get("model"), list):
            return fields
        models: list[Any] = fields["model"]
        if not models or not all(isinstance(m, str) and m.strip() for m in models):
            raise ValueError("model: a list of models must hold one or more non-empty names")
        if len(set(models)) != len(models):
            raise ValueError("model: the list names a model twice")
        if fields.get("fallback_models"):
            raise ValueError("model: give fallbacks either in the model list or fallback_models")
        return {**fields, "model": models[0], "fallback_models": list(models[1:])}

    @field_validator("fallback_models")
    @classmethod
    def _fallback_names(cls, v: list[str]) -> list[str]:
        if not all(m.strip() for m in v):
            raise ValueError("fallback model names must be non-empty")
        return v

    @field_validator("tools")
    @classmethod
    def _unique_tools(cls, v: list[str | ToolEntry]) -> list[str | ToolEntry]:
        names = [t if isinstance(t, str) else t.name for t in v]
        if len(set(names)) != len(names):
            raise ValueError("tool names must be unique")
        return v

    @field_validator("mcp_servers")
    @classmethod
    def _server_names(cls, v: dict[str, McpServerSpec]) -> dict[str, McpServerSpec]:
        for name in v:
            check_server_name(name)
        return v

    @model_validator(mode="after")
    def _split_tool_entries(self) -> AgentSpec:
        names: list[str | ToolEntry] = []
        for entry in self.tools:
            if isinstance(entry, ToolEntry):
                if entry.task_queue:
                    self.tool_queues[entry.name] = entry.task_queue
                if entry.local is not None:
                    self.local_tools[entry.name] = entry.local
                names.append(entry.name)
            else:
                names.append(entry)
        self.tools = names
        self.policy.tools = {self._policy_key(n): p for n, p in self.policy.tools.items()}
        return self

    def _policy_key(self, name: str) -> str:
        server, dot, tool = name.partition(".")
        return tool_name(server, tool) if dot and server in self.mcp_servers else name

    def models(self) -> list[str]:
        """The primary model, then the fallbacks, in the order they are tried."""
        return [self.model, *(m for m in self.fallback_models if m != self.model)]

    def tool_names(self) -> list[str]:
        """The names in ``tools`` (the worker's own tools, not the MCP servers')."""
        return [t if isinstance(t, str) else t.name for t in self.tools]


class PinnedSpec(BaseModel):
    """The spec as pinned into a run: the agent, its tools' schemas, and the sha256 of both."""

    spec: AgentSpec
    tools: list[ToolInfo]
    spec_hash: str
    source: str
    search_attributes: bool | None = Field(
        default=None,
        description="the namespace has every search attribute the run sets "
        "(activities.contracts.SEARCH_ATTRIBUTES); None: not known (results recorded before "
        "this field, or the server could not say), the run then sets them only when its "
        "starter set AgentName",
    )
    workflow_rev: int = 0
    """``ResolveSpecInput.workflow_rev`` echoed back (0 in histories recorded before it)."""


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
        spec = AgentSpec.model_validate(body)
    except ValidationError as e:
        raise SpecError(_format_error(agent, e)) from None
    try:
        check_agent_graph(agents, agent)
    except AgentGraphError as e:
        raise SpecError(str(e)) from None
    return spec


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
}
_NEW_TOOL_DEFAULTS: dict[str, Any] = {"agent": None, "kind": "tool"}


_NEW_NESTED_DEFAULTS: dict[str, dict[str, Any]] = {
    "limits": {"max_sandbox_seconds": None},
    "pricing": {"sandbox_per_second": 0.0},
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
