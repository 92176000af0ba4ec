"""Inputs and outputs of every activity: the data that crosses the workflow/activity boundary.

One input model per activity, so fields can be added later without breaking runs in flight.
Everything here is plain pydantic and travels as JSON through ``temporalio.contrib.pydantic``.
Activity names are stable and namespaced; they are listed in :data:`ACTIVITY_NAMES`.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from activities.client_tools import CLIENT_TOOL_TIMEOUT_SECONDS as CLIENT_TOOL_TIMEOUT_SECONDS
from activities.client_tools import ClientToolDef
from activities.guardrail_models import GuardrailTrip, StageGuardrails
from activities.usage import Usage as Usage  # re-exported: its home before it had one

MODEL_COMPLETE = "model.complete"
TOOL_INVOKE = "tool.invoke"
SPEC_RESOLVE = "spec.resolve"
CODE_STEP = "code.step"
TOKENS_COUNT = "tokens.count"
GUARDRAIL_CHECK = "guardrail.check"
ACTIVITY_NAMES = (MODEL_COMPLETE, TOOL_INVOKE, SPEC_RESOLVE, TOKENS_COUNT, GUARDRAIL_CHECK)


FAIRNESS_KEY_MAX_BYTES = 64
"""Longest fairness key Temporal accepts, in UTF-8 bytes (``temporalio.common.Priority``)."""


def fairness_key(tenant_id: str) -> str:
    """The Temporal fairness key of a tenant: ``tenant_id`` itself when it fits in 64 bytes.

    A longer id becomes its first bytes, ``~`` and 16 hex digits of its sha256, so distinct
    tenants keep distinct keys. Deterministic (the workflow calls it); an empty id gives ``""``
    (Temporal's "inherit / default" key).
    """
    raw = tenant_id.encode()
    if len(raw) <= FAIRNESS_KEY_MAX_BYTES:
        return tenant_id
    digest = hashlib.sha256(raw).hexdigest()[:16]
    head = raw[: FAIRNESS_KEY_MAX_BYTES - 17].decode(errors="ignore")
    return f"{head}~{digest}"


def model_task_queue(task_queue: str, model: str) -> str:
    """The task queue of a rate-limited model's steps: ``<task queue>.model.<model>``.

    Workers serve it with Temporal's server-side ``max_task_queue_activities_per_second`` set to
    the model's ``rate_limits`` entry, so the limit holds across every worker of the queue.
    """
    return f"{task_queue}.model.{model}"


SEARCH_ATTRIBUTES = (
    "AgentName",
    "TenantId",
    "PrincipalId",
    "AgentStatus",
    "TotalTokens",
    "CostUsd",
    "SpecHash",
)
"""Custom search attributes every run sets when the namespace has them all (temporal-dev.yml)."""

# Error types raised as ``ApplicationError(type=...)`` by activities; the workflow matches on them.
ERR_MODEL_OUTPUT_INVALID = "ModelOutputInvalid"
ERR_MODEL_REQUEST_REJECTED = "ModelRequestRejected"
ERR_MODEL_UNAVAILABLE = "ModelUnavailable"
ERR_SPEC_INVALID = "AgentSpecInvalid"
ERR_MCP_UNAVAILABLE = "McpServerUnavailable"


class ToolCallRequest(BaseModel):
    """One tool call as the model wrote it.

    ``arguments`` is the raw JSON text from the model: it may be malformed, which is the tool
    activity's to report back to the model, not the model activity's.
    """

    id: str
    name: str
    arguments: str = "{}"


class ModelSettings(BaseModel):
    """Sampling settings for one model step."""

    temperature: float = 0.2
    max_tokens: int | None = 1024
    top_p: float | None = None
    retry_temperature_step: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="added to the temperature on the attempt after one whose output could not "
        "be read (never after other errors); 0, the default: every retry sends the same request",
    )


class MemoryScopeRef(BaseModel):
    """One namespace a model step reads: ``(tenant_id, scope)`` (activities/memory/items.py)."""

    tenant_id: str
    scope: str


class MemoryRequest(BaseModel):
    """What memory a model step gets, set by the workflow from the spec (never by the model).

    The activity searches ``namespaces`` with the last user message, and puts the hits into the
    model's context as one system block with their ids, at most ``max_tokens`` (about 4
    characters a token).
    """

    namespaces: list[MemoryScopeRef]
    max_tokens: int = 800
    limit: int = 8


class MemoryRef(BaseModel):
    """An item given to the model in a step: its id, namespace scope and text (as given)."""

    id: str
    scope: str
    text: str


class CallModelInput(BaseModel):
    """Input of ``model.complete``: one chat-completions request.

    ``messages`` are in OpenAI chat format; ``tools`` are OpenAI function-tool schemas
    (``{"type": "function", "function": {"name", "description", "parameters"}}``).
    """

    run_id: str
    turn: int
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    settings: ModelSettings = Field(default_factory=ModelSettings)
    prompt_price_per_mtok: float = 0.0
    completion_price_per_mtok: float = 0.0
    cached_prompt_price_per_mtok: float | None = None
    """US dollars per million prompt tokens served from the endpoint's prompt cache
    (``Usage.cached_prompt_tokens``); None: priced as any prompt token."""
    tenant_id: str = "default"
    memory: MemoryRequest | None = None
    """Memory retrieval before the request (None: none, no cost; docs/memory.md)."""
    stream: bool = True
    """Stream the reply (``stream=True``) so its text can be published while it is written. The
    workflow sets it when someone watches the run as the step is scheduled
    (``RunEvents.watched``); a step nobody watches is one plain request, whose text the workflow
    emits whole when the step ends. Inputs recorded before this field existed stream."""
    tools_first: list[StepToolCall] = Field(default_factory=lambda: list[StepToolCall]())
    """Tool calls the workflow already allowed, run by this activity before it asks the model
    (local tools' calls from the turn before; docs/throughput.md, "Local tools ride the next model
    step"). Their results fill the ``tool`` messages of ``messages`` with the same
    ``tool_call_id`` (left empty by the workflow) and come back in ``ModelReply.tool_outcomes``."""
    token_room: int | None = None
    """With ``tools_first``: the compaction budget left, in tokens, for the messages after the
    first ``counted_messages`` (whose exact counts the workflow holds). When the upper bound of
    those messages with the tool results filled in (``workflows.compaction.token_upper_bound``)
    is over it, the activity does not call the model (``ModelReply.model_skipped``)."""
    counted_messages: int = 0
    max_attempts: int | None = None
    """Attempts of this step the model server may fail (activities/model_attempts.py): the step's
    retry policy then sets no maximum, so attempts lost with a worker (heartbeat or start-to-close
    timeouts) do not use them up; the run's deadline bounds those. None (inputs recorded before
    this field): the retry policy's ``maximum_attempts`` counts every attempt."""
    context_window: int | None = None
    """The largest prompt the model takes, in tokens (the spec's ``compaction.context_window``);
    with the server's measured speed it sizes the attempt's own limit (activities/model_pace.py).
    None: :data:`activities.model_pace.DEFAULT_WINDOW_TOKENS`."""
    guardrails: StageGuardrails | None = None
    """The spec's ``output`` guardrails: the reply's text is checked before it leaves the activity
    (``ModelReply.guardrails``); None: no check (docs/guardrails.md)."""


class ModelReply(BaseModel):
    """Normalised reply of one model step.

    ``content`` is the assistant's text (``None`` when it only called tools); ``latency_ms`` is
    wall time of the HTTP call in milliseconds, measured in the activity.
    """

    content: str | None = None
    tool_calls: list[ToolCallRequest] = Field(default_factory=list[ToolCallRequest])
    usage: Usage = Field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""
    latency_ms: float = 0.0
    memory: list[MemoryRef] = Field(default_factory=list[MemoryRef])
    """The memory items the model was given in this step (recorded in the history)."""
    temperature: float | None = None
    """The temperature the answering attempt was sent with (the spec's, or raised by
    ``retry_temperature_step`` after unreadable output)."""
    streamed_chars: int = 0
    """How many characters of ``content`` the activity published as ``text_delta`` events (the
    workflow emits the rest, so a step's deltas always add up to its reply text)."""
    tool_outcomes: list[ToolOutcome] = Field(default_factory=lambda: list[ToolOutcome]())
    """Results of ``CallModelInput.tools_first``, one per call, in their order."""
    tool_events_published: bool = False
    """The step published the ``tool_finished`` events of ``tool_outcomes`` itself (the run was
    watched: ``stream``), before it asked the model; the workflow does not emit them again."""
    model_skipped: bool = False
    """The step ran ``tools_first`` but did not call the model: with their results the transcript
    may be over the compaction budget (``CallModelInput.token_room``). The workflow compacts,
    then asks the model in a new step; ``content`` is None and ``usage`` zero. Also set when a
    held call's result tripped a ``block`` guardrail: the model is not asked with it."""
    guardrails: list[GuardrailTrip] = Field(default_factory=lambda: list[GuardrailTrip]())
    """Guardrails the reply's text tripped (``CallModelInput.guardrails``); ``content`` is already
    what they left of it (redacted, or withheld by a ``block``, whose tool calls are dropped)."""

    def assistant_message(self) -> dict[str, Any]:
        """The reply as an OpenAI-format assistant message for the transcript."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in self.tool_calls
            ]
        return msg


class McpServerConfig(BaseModel):
    """How to reach one MCP server, as pinned with the spec (``mcp_servers.NAME`` of an agent).

    Exactly one of ``command`` (a stdio server the worker starts: argv, ``python`` meaning the
    worker's own interpreter) or ``url`` (a streamable-HTTP endpoint). ``env`` and ``headers``
    values, ``url`` and ``command`` may name worker environment variables as ``${VAR}``: they are
    expanded on the worker when it connects, so secret values never enter the history.
    ``cwd`` is an absolute directory (default: the spec file's folder).
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    handshake_timeout_seconds: float = Field(
        default=10.0, gt=0, description="a stdio server must answer the MCP handshake within this"
    )


class McpTarget(BaseModel):
    """Where one MCP tool runs: its server and the server's own name for it (``tool``)."""

    model_config = ConfigDict(extra="forbid")

    server: McpServerConfig
    tool: str


class InvokeToolInput(BaseModel):
    """Input of ``tool.invoke``: one tool call to run on the worker.

    ``arguments`` is the model's raw JSON text, or a dict when a person edited the arguments at
    approval. ``workspace`` is the absolute root the workspace tools are confined to.
    ``max_output_chars`` bounds the tool message returned to the model (characters).
    ``mcp`` is the pinned :class:`McpTarget` of an MCP tool (``None`` for the worker's own tools).
    """

    run_id: str
    turn: int
    call_id: str
    name: str
    arguments: str | dict[str, Any]
    workspace: str
    max_output_chars: int = 16_000
    tenant_id: str = "default"
    principal_id: str = "anonymous"
    secrets: list[str] = Field(default_factory=list)
    mcp: McpTarget | None = None
    run_files: dict[str, str] = Field(
        default_factory=dict,
        description="files earlier sandboxed calls of the run wrote: name -> payload store key",
    )
    guardrails: StageGuardrails | None = None
    """The spec's ``tool_results`` guardrails: the result is checked before it leaves the activity
    (``ToolOutcome.guardrails``); None: no check (docs/guardrails.md)."""


class ToolOutcome(BaseModel):
    """Result of ``tool.invoke``.

    ``status`` is ``ok`` or ``error`` (a business error: bad arguments, unknown tool, the tool
    refused); ``content`` is what the model sees; ``output_chars`` is the untruncated size in
    characters; ``duration_ms`` is wall time of the tool function in milliseconds.
    """

    call_id: str
    name: str
    status: Literal["ok", "error"]
    content: str
    truncated: bool = False
    output_chars: int = 0
    duration_ms: float = 0.0
    arguments: dict[str, Any] | None = None
    files: dict[str, str] | None = None
    """Files this call wrote, kept in the payload store: name -> key (sandboxed tools)."""
    failure: str | None = None
    """Set only for a call of ``CallModelInput.tools_first`` that failed on every attempt (an
    exception or its timeout, not a business error): the error, redacted. ``status`` is then
    ``error`` and ``content`` what the model is told (``workflows.turn.settle_failure``); the
    workflow records the call as it records a failed activity."""
    timed_out: bool = False
    """With ``failure``: the last attempt ran out of ``StepToolCall.timeout_seconds``."""
    guardrails: list[GuardrailTrip] = Field(default_factory=lambda: list[GuardrailTrip]())
    """Guardrails the result tripped (``InvokeToolInput.guardrails``); ``content`` is already what
    they left of it (redacted, or withheld by a ``block``)."""


def fill_tool_messages(
    messages: list[dict[str, Any]], texts: dict[str, str]
) -> list[dict[str, Any]]:
    """``messages`` with the empty ``tool`` messages named in ``texts`` (call id -> text) filled.

    The results of ``CallModelInput.tools_first``; every other message is left as it is.
    """
    return [
        {**m, "content": texts[m["tool_call_id"]]}
        if m.get("role") == "tool" and not m.get("content") and m.get("tool_call_id") in texts
        else m
        for m in messages
    ]


class StepToolCall(BaseModel):
    """One call of ``CallModelInput.tools_first``: a ``tool.invoke`` input and the tool's limits.

    ``timeout_seconds`` bounds one attempt (``ToolInfo.timeout_seconds``, seconds);
    ``max_attempts`` is ``ToolInfo.max_attempts``.
    """

    call: InvokeToolInput
    timeout_seconds: float = 30.0
    max_attempts: int = 1


class ToolInfo(BaseModel):
    """What the workflow knows of a tool: its schema and how to run it, pinned with the spec.

    ``timeout_seconds`` is the start-to-close timeout of one attempt; ``max_attempts`` bounds
    Temporal's retries for infrastructure errors; ``risk`` is the tool's own default policy hint
    (``read`` tools are allowed by default, ``write``/``exec``/``network`` tools need approval).
    ``task_queue``, when set, is the queue the tool's activities run on (a worker started with
    ``agentctl worker --task-queue Q --tools-only`` serves it); ``None`` means the run's queue.
    ``mcp``, when set, says the tool is served by an MCP server (``tool.invoke`` routes by it).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    timeout_seconds: float = 30.0
    max_attempts: int = 3
    risk: Literal["read", "write", "exec", "network"] = "read"
    sandboxed: bool = False
    """The tool runs in the OS sandbox: an exec tool then waits for approval by default."""
    task_queue: str | None = None
    local: bool = False
    """Calls run as local activities on the workflow's worker (no activity task on the server;
    Temporal Cloud counts all local activities of one workflow task as one action). Never with
    ``task_queue`` or ``mcp``."""
    mcp: McpTarget | None = None
    kind: Literal["tool", "subagent", "handoff", "code", "client"] = "tool"
    """``subagent``: ``ask_<agent>`` starts a child run; ``handoff``: ``handoff_to_<agent>`` hands
    the run to another agent; neither is a ``tool.invoke`` activity (activities/subagents.py).
    ``code``: the Code Mode tool, a script over the agent's tools (workflows/code_mode.py).
    ``client``: the client runs it; the run waits for update ``tool_result`` up to
    ``timeout_seconds`` (workflows/client_tools.py, docs/tools.md)."""
    callback: bool = False
    """The tool may hand an outside system a callback URL (``ToolContext.callback_url``) and
    finish later through ``POST /callbacks/{token}``: its activity has no heartbeat timeout (the
    outside system cannot heartbeat), only ``timeout_seconds``."""
    agent: str | None = None
    """The agent a ``subagent`` or ``handoff`` tool names."""

    def openai_schema(self) -> dict[str, Any]:
        """The tool as an OpenAI function-tool schema."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ResolveSpecInput(BaseModel):
    """Input of ``spec.resolve``: which agent, from which spec file (``None``: the worker's)."""

    agent: str
    spec_file: str | None = None
    workflow_rev: int = 0
    """The workflow code's revision, echoed into :attr:`PinnedSpec.workflow_rev` so the run's
    history records which behaviour it started with (0: a workflow before revision 3)."""
    tools: list[str] | None = None
    """Offer only these of the agent's tools (``RunRequest.tools``); None: all of them."""
    client_tools: list[ClientToolDef] | None = None
    """Tools the client runs, sent with the request (``RunRequest.client_tools``): pinned
    beside the spec's own (a name the agent already has is refused)."""
    model: str | None = None
    """The request's model (``RunRequest.model``), which the run uses in place of the spec's:
    :attr:`PinnedSpec.tools_tokens` is counted with its encoding."""


class CountTokensInput(BaseModel):
    """Input of ``tokens.count``: messages and tools to count with the model's encoding."""

    model: str
    encoding: str | None = None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])


class TokenCounts(BaseModel):
    """Output of ``tokens.count``: tokens per message (same order), of the tool schemas, and total."""

    per_message: list[int]
    tools: int
    total: int
    encoding: str


class HostCall(BaseModel):
    """A tool call a Code Mode script asked for: Monty's call id, the tool, keyword arguments."""

    call_id: int
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class HostResult(BaseModel):
    """The answer to one :class:`HostCall`.

    The tool's text (``value``), or an exception raised in the script (``exc_type`` a Python
    exception name, ``error`` its message).
    """

    call_id: int
    value: str | None = None
    error: str | None = None
    exc_type: str = "RuntimeError"


class CodeStepInput(BaseModel):
    """Input of ``code.step`` (activities/code_mode.py).

    The first step carries ``script``; later steps ``snapshot`` (base64 of the paused
    interpreter) and ``results`` of the calls it asked for. ``tools``: the names the script may
    call. ``now`` (ISO-8601 workflow time) and ``seed`` fix the script's clock and ``random``.
    ``step_seconds``: execution time allowed between two host round trips; ``max_memory_bytes``:
    the interpreter's heap.
    """

    script: str = ""
    snapshot: str | None = None
    results: list[HostResult] = Field(default_factory=list[HostResult])
    tools: list[str] = Field(default_factory=list)
    now: str
    seed: int = 0
    step_seconds: float = 2.0
    max_memory_bytes: int = 64 * 1024 * 1024


class CodeStepOutput(BaseModel):
    """Result of ``code.step``.

    ``calls`` (a batch to run, with ``snapshot``), ``done`` (the script's ``value``) or ``error``
    (the script's exception, as ``Type: message``). ``stdout`` is what this step printed
    (capped; ``truncated`` then).
    """

    status: Literal["calls", "done", "error"]
    calls: list[HostCall] = Field(default_factory=list[HostCall])
    snapshot: str | None = None
    value: Any = None
    stdout: str = ""
    truncated: bool = False
    error: str | None = None


CallModelInput.model_rebuild()
ModelReply.model_rebuild()
