"""Activities ``tool.invoke`` and ``spec.resolve``: running tools and pinning agent specs.

Both read worker-side configuration (the tool registry, the spec file), so they are methods of
:class:`RuntimeActivities`, built once per worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import structlog
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from activities import held_calls, metrics
from activities.callbacks import CallbackSigner
from activities.code_mode import code_tool
from activities.contracts import (
    ERR_MCP_UNAVAILABLE,
    ERR_SPEC_INVALID,
    GUARDRAIL_CHECK,
    SPEC_RESOLVE,
    TOOL_INVOKE,
    InvokeToolInput,
    ResolveSpecInput,
    StepToolCall,
    ToolInfo,
    ToolOutcome,
)
from activities.extras import install_hint, installed
from activities.guardrail_models import GuardrailCheckInput, GuardrailCheckOutput
from activities.heartbeat import await_with_heartbeats
from activities.mcp.config import referenced_vars
from activities.mcp.pool import McpPool
from activities.mcp.tools import McpToolsError, idempotency_key, invoke_mcp, pin_server_tools
from activities.redaction import (
    ALWAYS_SECRET,
    REDACTED,
    add_secret_names,
    redactor_for,
)
from activities.search_attributes import namespace_has_search_attributes
from activities.spec import (
    AgentSpec,
    PinnedSpec,
    SpecError,
    load_spec_file,
    pin_cedar,
    resolve_agent,
    spec_hash,
)
from activities.spec_tools import check_guardrail_names, client_tools, only_tools
from activities.subagents import agent_tools
from activities.tokens import tools_tokens_at_pin
from activities.tools import REGISTRY, ToolContext, ToolRegistry, UnknownToolError

log = structlog.get_logger("activities.runtime")

__all__ = ["REDACTED", "RuntimeActivities"]


class RuntimeActivities:
    """Tool and spec activities of one worker.

    Args:
        spec_file: default agent spec file (``AGENT_SPEC_FILE``).
        default_model: model used when a spec names none (``AGENT_MODEL``).
        registry: the tool registry (default: the process-wide one that ``@tool`` fills).
        always_secret: environment variables whose values are always secret (by default
            ``OPENAI_API_KEY`` and ``TEMPORAL_API_KEY``), besides the spec's ``secrets:`` and
            the variables an MCP server's settings refer to.
        own_dirs: folders of the runtime's own local state (``AGENT_STATE_DIR``): a spec's
            workspace inside one of them that does not exist yet is created, empty, on first use
            (the default agent's ``.agent-runtime/workspace`` on a fresh clone). A missing
            workspace anywhere else stays an error that says how to create it.
        mcp_pool: the worker's MCP connections (a new pool when omitted); :meth:`aclose` stops
            its stdio servers.
        callbacks: signs the callback URLs of tools finished later
            (``ToolContext.callback_url``, activities/callbacks.py); None: such tools get a
            ``ToolError`` when they ask for one.

    Secrets are redacted from everything an activity returns, raises, heartbeats or logs by
    :class:`activities.redaction.RedactingInterceptor`, which ``build_worker`` installs; tool
    output is redacted before it is truncated (``ToolRegistry.invoke``, ``invoke_mcp``).
    """

    def __init__(
        self,
        spec_file: str,
        default_model: str,
        registry: ToolRegistry | None = None,
        always_secret: tuple[str, ...] = ALWAYS_SECRET,
        own_dirs: tuple[str | Path, ...] = (),
        mcp_pool: McpPool | None = None,
        callbacks: CallbackSigner | None = None,
    ) -> None:
        self._spec_file = spec_file
        self._default_model = default_model
        self._registry = registry or REGISTRY
        add_secret_names(always_secret)
        self._search_attributes: bool | None = None  # the namespace's answer, once known
        self._own_dirs = tuple(Path(d).expanduser().resolve() for d in own_dirs)
        self.mcp_pool = mcp_pool or McpPool()
        self.callbacks = callbacks

    async def aclose(self) -> None:
        """Stop the MCP stdio servers this worker started."""
        await self.mcp_pool.aclose()

    @activity.defn(name=SPEC_RESOLVE)
    async def spec_resolve(self, req: ResolveSpecInput) -> PinnedSpec:
        """Read, validate and hash one agent of the spec file.

        MCP servers' tool lists are read here, once, and pinned with the spec.

        Raises:
            ApplicationError: non-retryable ``AgentSpecInvalid`` naming the file and field, or an
                unknown tool (with the available ones); retryable ``McpServerUnavailable`` naming
                the server when an MCP server cannot be reached.
        """
        path = req.spec_file or self._spec_file
        try:
            spec = resolve_agent(path, req.agent, self._default_model)
            tools = await self._pin_tools(spec)
            tools += self._agent_tools(path, spec, tools)
            tools += self._code_tool(spec, tools)
            tools += client_tools(spec, tools, req.client_tools)
            tools = only_tools(tools, req.tools, spec.name)
            check_guardrail_names(spec)
            pin_cedar(spec, tools)
        except (SpecError, UnknownToolError, McpToolsError) as e:
            raise ApplicationError(str(e), type=ERR_SPEC_INVALID, non_retryable=True) from None
        self._ensure_workspace(req.agent, Path(spec.workspace), path)
        return PinnedSpec(
            spec=spec,
            tools=tools,
            spec_hash=spec_hash(spec, tools),
            source=str(path),
            search_attributes=await self._namespace_has_search_attributes(),
            workflow_rev=req.workflow_rev,
            tools_tokens=await tools_tokens_at_pin(
                [t.openai_schema() for t in tools],
                req.model or spec.model,
                spec.compaction.encoding,
                spec.compaction.budget_tokens(),
            ),
        )

    @staticmethod
    def _agent_tools(path: str, spec: AgentSpec, tools: list[ToolInfo]) -> list[ToolInfo]:
        """``ask_<NAME>`` / ``handoff_to_<NAME>`` of the spec (activities/subagents.py)."""
        extra = agent_tools(load_spec_file(path)["agents"], spec.name)
        clash = [t.name for t in extra if t.name in {t.name for t in tools}]
        if clash:
            raise SpecError(
                f"agents.{spec.name}: tool(s) {', '.join(clash)} clash with its sub-agents' tools"
            )
        return extra

    @staticmethod
    def _code_tool(spec: AgentSpec, tools: list[ToolInfo]) -> list[ToolInfo]:
        """The Code Mode tool of the spec, if it has ``code_mode`` (activities/code_mode.py).

        Raises:
            SpecError: ``code_mode.tools`` names a tool the agent lacks (or a sub-agent or
                handoff tool), the tool's name clashes with another tool, or this worker lacks
                pydantic-monty (the extra ``code-mode``): the run fails as it starts, saying so.
        """
        cm = spec.code_mode
        if cm is None:
            return []
        if not installed("pydantic_monty"):
            raise SpecError(
                f"agents.{spec.name}.code_mode: Code Mode needs pydantic-monty, which is not "
                f"installed on this worker: {install_hint('code-mode')}"
            )
        own = {t.name: t for t in tools if t.kind == "tool"}
        missing = [n for n in cm.tools if n not in own]
        if missing:
            raise SpecError(
                f"agents.{spec.name}.code_mode.tools: {', '.join(missing)} not among the agent's "
                f"tools ({', '.join(own) or 'none'})"
            )
        if cm.tool in {t.name for t in tools}:
            raise SpecError(f"agents.{spec.name}.code_mode.tool: {cm.tool!r} is already a tool")
        return [code_tool(cm.tool, [own[n] for n in cm.tools], cm.max_calls)]

    def _ensure_workspace(self, agent: str, ws: Path, spec_file: str) -> None:
        """Create a missing workspace inside the runtime's own folders; else explain the fix.

        Raises:
            ApplicationError: non-retryable ``AgentSpecInvalid`` when ``ws`` is not a directory
                and may not be created here (the message names the command to run).
        """
        if ws.is_dir():
            return
        resolved = ws.resolve()
        if not ws.exists() and any(resolved.is_relative_to(d) for d in self._own_dirs):
            try:
                resolved.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise ApplicationError(
                    f"agents.{agent}.workspace: cannot create {ws}: {e}",
                    type=ERR_SPEC_INVALID,
                    non_retryable=True,
                ) from None
            log.info("workspace_created", agent=agent, workspace=str(resolved))
            return
        what = "is not a directory" if ws.exists() else "is not a directory (it does not exist)"
        raise ApplicationError(
            f"agents.{agent}.workspace: {ws} {what}; create it (mkdir -p {ws}) or point "
            f"agents.{agent}.workspace in {spec_file} at an existing folder",
            type=ERR_SPEC_INVALID,
            non_retryable=True,
        )

    async def _namespace_has_search_attributes(self) -> bool | None:
        """Whether the namespace has every run search attribute (asked once per worker).

        Returns None when it cannot be known (no client in this activity context, or the
        operator service refused): the run then keeps the start-time gate.
        """
        if self._search_attributes is not None:
            return self._search_attributes
        try:
            self._search_attributes = await namespace_has_search_attributes(activity.client())
        except (RuntimeError, RPCError) as e:
            log.warning("search_attributes_unknown", error=str(e))
            return None
        return self._search_attributes

    async def _pin_tools(self, spec: AgentSpec) -> list[ToolInfo]:
        """The worker's tools named by the spec, then every MCP server's (listed concurrently)."""
        tools = self._registry.infos(spec.tool_names())
        for info in tools:
            info.task_queue = spec.tool_queues.get(info.name)
            info.local = spec.local_tools.get(info.name, info.local) and not info.task_queue
        servers = list(spec.mcp_servers)
        listed = await asyncio.gather(*(self._pin_server(spec, name) for name in servers))
        for name, pinned in zip(servers, listed, strict=True):
            clash = [t.name for t in pinned if t.name in {t.name for t in tools}]
            if clash:
                raise McpToolsError(
                    f"agents.{spec.name}.mcp_servers.{name}: tool(s) {', '.join(clash)} "
                    "clash with tools of the same name"
                )
            tools += pinned
        return tools

    async def _pin_server(self, spec: AgentSpec, name: str) -> list[ToolInfo]:
        server = spec.mcp_servers[name]
        try:
            return await pin_server_tools(self.mcp_pool, name, server)
        except McpToolsError as e:
            raise McpToolsError(f"agents.{spec.name}.{e}") from None
        except ApplicationError as e:
            # These secrets become known only now, from the spec just read: the interceptor's
            # redactor of this activity predates them, so this message is redacted here.
            names = [*spec.secrets, *referenced_vars(server.pinned(name))]
            add_secret_names(names)  # log lines from now on
            msg = redactor_for(names).redact(f"agents.{spec.name}.mcp_servers.{name}: {e.message}")
            raise ApplicationError(msg, type=ERR_MCP_UNAVAILABLE) from None

    @activity.defn(name=TOOL_INVOKE)
    async def tool_invoke(self, req: InvokeToolInput) -> ToolOutcome:
        """Run one tool call; heartbeats while it runs and honours cancellation.

        Business errors (bad arguments, unknown tool, a ``ToolError``) come back as
        ``status="error"`` for the model; any other exception propagates so Temporal retries it
        (as an ``ApplicationError`` of the same type name, redacted, by the worker's
        interceptor). The tool gets ``ctx.idempotency_key = "<workflow id>/<call id>"``.
        """
        bound = _bound_log(req)
        started = time.perf_counter()
        try:
            outcome = await await_with_heartbeats(self._checked(req), lambda ms: {"running_ms": ms})
        except asyncio.CancelledError:
            bound.info("tool_cancelled")
            metrics.tool_call(req.name, "cancelled")
            raise
        except Exception as exc:
            metrics.tool_call(req.name, "infrastructure_error")
            bound.warning(
                "tool_infrastructure_error",
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
                error_type=type(exc).__name__,
                error=str(exc),  # redacted by the logging chain (activities/redaction.py)
            )
            raise  # its message and causes are redacted by the worker's interceptor
        bound.info(
            "tool_call",
            status=outcome.status,
            duration_ms=outcome.duration_ms,
            output_chars=outcome.output_chars,
            truncated=outcome.truncated,
        )
        metrics.tool_call(req.name, outcome.status, outcome.duration_ms)
        return outcome

    async def _checked(self, req: InvokeToolInput) -> ToolOutcome:
        """:meth:`_run`, its result then through the spec's ``tool_results`` guardrails.

        The result leaves the activity already checked: redacted, or withheld by a ``block``
        (``ToolOutcome.guardrails`` says which tripped; docs/guardrails.md).
        """
        if req.guardrails is None or not req.guardrails.entries:
            return await self._run(req)
        from activities.guardrails import GuardrailContext, check
        from activities.tools.output import keeping_raw

        with keeping_raw() as raw:
            out = await self._run(req)
        ctx = GuardrailContext(
            stage="tool_results", run_id=req.run_id, turn=req.turn, tenant_id=req.tenant_id,
            tool=req.name,
        )  # fmt: skip
        out.content, out.guardrails = await check(
            out.content, req.guardrails, ctx, raw="\n".join(raw) if raw else None
        )
        for trip in out.guardrails:
            trip.tool_call_id, trip.turn = req.call_id, req.turn
        if out.guardrails:
            _bound_log(req).info(
                "guardrail_tripped",
                stage="tool_results",
                guardrails=[(t.guardrail, t.action) for t in out.guardrails],
            )
        return out

    @activity.defn(name=GUARDRAIL_CHECK)
    async def guardrail_check(self, req: GuardrailCheckInput) -> GuardrailCheckOutput:
        """Check one user message with the spec's ``input`` guardrails (a local activity).

        Returns the text to give the model (redacted, or withheld by a ``block``) and the
        guardrails it tripped. A ``@guardrail`` that raises has tripped (docs/guardrails.md).
        """
        from activities.guardrails import GuardrailContext, check

        ctx = GuardrailContext(
            stage=req.guardrails.stage, run_id=req.run_id, turn=req.turn, tenant_id=req.tenant_id
        )
        text, trips = await check(req.text, req.guardrails, ctx)
        for trip in trips:
            trip.turn = req.turn
        if trips:
            log.info(
                "guardrail_tripped",
                run_id=req.run_id,
                stage=req.guardrails.stage,
                guardrails=[(t.guardrail, t.action) for t in trips],
            )
        return GuardrailCheckOutput(text=text, guardrails=trips, stage=req.guardrails.stage)

    def _run(self, req: InvokeToolInput) -> Coroutine[Any, Any, ToolOutcome]:
        """The call's coroutine: its MCP server's tool or the registry's (no heartbeats)."""
        ctx = ToolContext(
            workspace=Path(req.workspace),
            run_id=req.run_id,
            turn=req.turn,
            call_id=req.call_id,
            tenant_id=req.tenant_id,
            principal_id=req.principal_id,
            idempotency_key=idempotency_key(req),
            run_files=dict(req.run_files),
            callback=self._callback_maker(req),
        )
        if req.mcp is not None:
            return invoke_mcp(self.mcp_pool, req, timeout=None)
        return self._registry.invoke(
            req.name, req.arguments, ctx, max_output_chars=req.max_output_chars
        )

    def _callback_maker(self, req: InvokeToolInput) -> Callable[[], str] | None:
        """What makes the call's callback URL: None without a signer or outside an activity."""
        signer = self.callbacks
        if signer is None or not activity.in_activity():
            return None
        info = activity.info()
        if info.is_local or info.activity_type != TOOL_INVOKE:  # not its own activity
            return None
        return lambda: signer.for_current_activity(
            req.run_id, req.call_id, req.name, req.max_output_chars
        )

    async def run_first(self, calls: list[StepToolCall]) -> list[ToolOutcome]:
        """Run a model step's ``tools_first`` calls concurrently, inside that step's activity.

        Each as :meth:`tool_invoke` would, with its timeout and attempts: :func:`held_calls.run`
        (activities/held_calls.py). Returns one outcome per call, in order.

        Raises:
            asyncio.CancelledError: the step was cancelled (interrupt, deadline); the calls are too.
        """
        return await held_calls.run(calls, self._checked, _bound_log)


def _bound_log(req: InvokeToolInput) -> Any:
    """The module's logger bound to one call (run, turn, tool, call id, tenant)."""
    return log.bind(
        run_id=req.run_id,
        turn=req.turn,
        tool=req.name,
        call_id=req.call_id,
        tenant_id=req.tenant_id,
    )
