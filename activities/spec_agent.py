"""An agent, resolved (:class:`AgentSpec`), and the spec as pinned into a run (:class:`PinnedSpec`).

:mod:`activities.spec` re-exports every name; :func:`activities.spec_pinning.resolve_agent` builds
an :class:`AgentSpec` from a spec file.
"""

from __future__ import annotations

import re
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from activities.contracts import CLIENT_TOOL_TIMEOUT_SECONDS, ClientToolDef, ToolInfo
from activities.guardrail_models import GuardrailsSpec
from activities.mcp.config import McpServerSpec, check_server_name, tool_name
from activities.spec_policy import Policy
from activities.spec_settings import (
    CodeModeSpec,
    Compaction,
    Limits,
    MemorySpec,
    PlanSettings,
    Pricing,
    RateLimit,
    ToolEntry,
)

__all__ = ["AGENT_TOOL_NAME", "AgentSpec", "PinnedSpec"]

AGENT_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,48}")
"""Agent names that may follow ``ask_`` / ``handoff_to_`` in a tool name (OpenAI: 64 chars)."""


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

    name: str = Field(description="the agent's name; set by the loader, not written in the file")
    model: str = Field(
        min_length=1,
        description="model name, or a list: the first is the model, the rest fallback_models "
        "(default: AGENT_MODEL)",
    )
    fallback_models: list[str] = Field(
        default_factory=list, description="models tried in order when a model step fails for good"
    )
    rate_limits: dict[str, RateLimit] = Field(
        default_factory=dict, description="the spec file's rate_limits (model -> limit)"
    )
    system_prompt: str = Field(
        default="You are a helpful assistant.", description="the system message of every run"
    )
    tools: list[str | ToolEntry] = Field(
        default_factory=list[str | ToolEntry],
        description="tool names, or {name, task_queue, local} entries, the agent may call",
    )
    tool_queues: dict[str, str] = Field(
        default_factory=dict,
        description="tool name -> task queue of its calls (from tools entries with task_queue:)",
    )
    local_tools: dict[str, bool] = Field(
        default_factory=dict,
        description="tool name -> run as a local activity (from tools entries with local:)",
    )
    client_tools: dict[str, ClientToolDef] = Field(
        default_factory=dict,
        description="tool name -> the tool the client runs (from tools entries with client: "
        "true; docs/tools.md)",
    )
    mcp_servers: dict[str, McpServerSpec] = Field(
        default_factory=dict,
        description="MCP servers whose tools the agent may call (name -> server)",
    )
    workspace: str = Field(
        default=".",
        description="folder the file tools work in, relative to the spec file; ~ and $VARS "
        "expanded (default: the spec file's folder)",
    )
    limits: Limits = Field(default_factory=Limits, description="per-run limits (Limits below)")
    policy: Policy = Field(
        default_factory=Policy, description="which tool calls are allowed, refused or need approval"
    )
    pricing: Pricing = Field(
        default_factory=Pricing, description="model prices, for cost and max_cost_usd"
    )
    compaction: Compaction = Field(
        default_factory=Compaction, description="context-window size and when to compact"
    )
    memory: MemorySpec | None = Field(
        default=None, description="long-term memory scopes read and written (none: no memory)"
    )
    code_mode: CodeModeSpec | None = Field(
        default=None, description="a tool that runs a Python script over the agent's tools"
    )
    guardrails: GuardrailsSpec | None = Field(
        default=None,
        description="checks of the user's messages, tool results and the model's text, each "
        "with an action (block, redact, flag); docs/guardrails.md (none: no checks, no cost)",
    )
    temperature: float = Field(default=0.2, ge=0, le=2, description="sampling temperature, 0-2")
    retry_temperature_step: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="added to the temperature only on the attempt after unreadable model output "
        "(0, the default: every retry of a model step sends the same request)",
    )
    max_output_tokens: int = Field(
        default=1024, ge=1, description="tokens one model step may generate at most"
    )
    model_timeout_seconds: float = Field(
        default=600,
        gt=0,
        description="start-to-close of one model attempt, a backstop: a dead worker is noticed by "
        "heartbeats within seconds, and a server that reports its speed (llama.cpp) sizes a "
        "shorter limit from it (activities/model_pace.py); 600 s lets a 2-core CPU process a "
        "full 8,192-token window (about 100 prompt tokens/s, docs/local-model-facts.md)",
    )
    model_max_attempts: int = Field(
        default=8,
        ge=1,
        description="attempts of one model step the model server may fail (errors, unreadable "
        "or stalled replies); attempts lost with a worker do not count, the run's deadline "
        "bounds them (activities/model_attempts.py)",
    )
    max_parse_failures: int = Field(
        default=2,
        ge=0,
        description="unparsable model outputs reported back to the model before the run fails",
    )
    max_tool_output_chars: int = Field(
        default=16_000, ge=100, description="a tool result longer than this is cut for the model"
    )
    local_tools_in_model_step: bool = Field(
        default=True,
        description="a turn's calls of local tools, all allowed by the policy, run at the start "
        "of the next model step's activity, not as local activities of their own: one Temporal "
        "action and one history event less per such turn (docs/throughput.md)",
    )
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
    plan: PlanSettings = Field(
        default_factory=PlanSettings, description="settings of mode: plan (PlanSettings below)"
    )

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
                if entry.client:
                    self.client_tools[entry.name] = ClientToolDef(
                        name=entry.name,
                        description=entry.description or "",
                        parameters=entry.parameters or {"type": "object", "properties": {}},
                        timeout_seconds=entry.timeout_seconds or CLIENT_TOOL_TIMEOUT_SECONDS,
                    )
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
        """The names in ``tools`` (the worker's own tools, not the MCP servers' or the client's)."""
        names = [t if isinstance(t, str) else t.name for t in self.tools]
        return [n for n in names if n not in self.client_tools]


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
    tools_tokens: int | None = None
    """Tokens of ``tools``' schemas as ``tokens.count`` counts them, counted when pinned when
    their upper bound is over half the compaction budget (:func:`activities.tokens.
    tools_tokens_at_pin`); None otherwise, and in results recorded before this field. A known
    count spares the run's first turn a ``tokens.count`` activity (workflows/turn.py)."""
