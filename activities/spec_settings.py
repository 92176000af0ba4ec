"""The settings sections of an agent spec: limits, pricing, memory, Code Mode, compaction, plans.

Also a ``tools:`` entry written as a mapping (:class:`ToolEntry`) and a model's rate limit
(:class:`RateLimit`). :mod:`activities.spec` re-exports every name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "CodeModeSpec",
    "Compaction",
    "Limits",
    "MAX_RUN_SECONDS",
    "MemorySpec",
    "PlanSettings",
    "Pricing",
    "RateLimit",
    "ToolEntry",
]


MAX_RUN_SECONDS = 10 * 365.25 * 24 * 3600
"""Longest ``max_seconds`` a spec or a request may set: 10 years. A ``timedelta`` holds at most
~8.6e13 seconds, so ``inf`` or ``1e300`` made the deadline overflow inside the workflow (found by
an outside probe); a run's deadline is meant to be reached."""


class Limits(BaseModel):
    """Per-run limits. Seconds are measured on workflow time (``workflow.now()``)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(default=20, ge=1, description="model steps at most")
    max_seconds: float = Field(
        default=300,
        gt=0,
        le=MAX_RUN_SECONDS,
        allow_inf_nan=False,
        description="wall seconds of workflow time at most (at most 10 years)",
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
    on_budget: Literal["stop", "pause"] = Field(
        default="stop", description="when max_cost_usd is reached: stop the run or pause it"
    )
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


class Pricing(BaseModel):
    """Price of the model in US dollars per million tokens (0 for a local model)."""

    model_config = ConfigDict(extra="forbid")

    prompt_per_mtok: float = Field(default=0.0, description="USD per million prompt tokens")
    completion_per_mtok: float = Field(default=0.0, description="USD per million completion tokens")
    cached_prompt_per_mtok: float | None = Field(
        default=None,
        ge=0,
        description="USD per million prompt tokens served from the endpoint's prompt cache "
        "(OpenAI bills them at a discount); unset: priced as prompt_per_mtok",
    )
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
        default_factory=list[Literal["user", "agent", "thread"]],
        description="scopes whose items are given to each model step",
    )
    write: list[Literal["user", "agent", "thread"]] = Field(
        default_factory=list[Literal["user", "agent", "thread"]],
        description="scopes the finished run's memories are consolidated into",
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

    context_window: int = Field(default=32_768, ge=256, description="the model's context, tokens")
    output_reserve: int = Field(default=1024, ge=0, description="tokens kept free for the reply")
    threshold: float = Field(
        default=0.8, gt=0, le=1, description="compact when the usable window is this full"
    )
    summarize: bool = Field(
        default=False, description="summarise the dropped turns with the model (else drop them)"
    )
    encoding: str | None = Field(
        default=None,
        description="encoding that counts tokens (activities/tokens.py; none: picked by model)",
    )

    def budget_tokens(self) -> float:
        """Tokens the transcript may hold before it is compacted (a float).

        ``threshold`` of the usable window, ``context_window - output_reserve``.
        """
        return self.threshold * (self.context_window - self.output_reserve)


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
    client: bool = Field(
        default=False,
        description="the client runs it (a front end, agentctl tool-result): the run records "
        "the call, publishes client_tool_requested and waits for update tool_result "
        "(docs/tools.md); needs description and parameters, no task_queue or local",
    )
    description: str | None = Field(
        default=None, description="client tools: what the tool does, as the model reads it"
    )
    parameters: dict[str, Any] | None = Field(
        default=None,
        description="client tools: the JSON schema of its arguments (default: no arguments)",
    )
    timeout_seconds: float | None = Field(
        default=None,
        gt=0,
        le=7 * 24 * 3600,
        allow_inf_nan=False,
        description="client tools: how long the run waits for its result, in seconds "
        "(default 600); then the model is told it timed out",
    )

    @model_validator(mode="after")
    def _client_fields(self) -> ToolEntry:
        if not self.client:
            given = [
                k
                for k in ("description", "parameters", "timeout_seconds")
                if getattr(self, k) is not None
            ]
            if given:
                raise ValueError(f"{', '.join(given)}: only for client tools (client: true)")
        elif self.task_queue or self.local:
            raise ValueError("a client tool runs in the client: no task_queue or local")
        return self
