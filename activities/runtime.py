"""Activities ``tool.invoke`` and ``spec.resolve``: running tools and pinning agent specs.

Both read worker-side configuration (the tool registry, the spec file), so they are methods of
:class:`RuntimeActivities`, built once per worker.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import structlog
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contracts import (
    ERR_MCP_UNAVAILABLE,
    ERR_SPEC_INVALID,
    SPEC_RESOLVE,
    TOOL_INVOKE,
    InvokeToolInput,
    ResolveSpecInput,
    ToolInfo,
    ToolOutcome,
)
from activities.heartbeat import await_with_heartbeats
from activities.mcp.config import referenced_vars
from activities.mcp.pool import McpPool
from activities.mcp.tools import McpToolsError, invoke_mcp, pin_server_tools
from activities.spec import AgentSpec, PinnedSpec, SpecError, resolve_agent, spec_hash
from activities.tools import REGISTRY, ToolContext, ToolRegistry, UnknownToolError

log = structlog.get_logger("activities.runtime")

REDACTED = "[REDACTED]"


def redact(text: str, secret_env_names: list[str]) -> str:
    """Replace the values of the named environment variables in ``text`` by ``[REDACTED]``.

    Values shorter than 4 characters are left alone (they would match everywhere).
    """
    for name in secret_env_names:
        value = os.environ.get(name)
        if value and len(value) >= 4 and value in text:
            text = text.replace(value, REDACTED)
    return text


class RuntimeActivities:
    """Tool and spec activities of one worker.

    Args:
        spec_file: default agent spec file (``AGENT_SPEC_FILE``).
        default_model: model used when a spec names none (``AGENT_MODEL``).
        registry: the tool registry (default: the process-wide one that ``@tool`` fills).
        always_secret: environment variables always redacted from tool output
            (by default ``OPENAI_API_KEY`` and ``TEMPORAL_API_KEY``).
        mcp_pool: the worker's MCP connections (a new pool when omitted); :meth:`aclose` stops
            its stdio servers.
    """

    def __init__(
        self,
        spec_file: str,
        default_model: str,
        registry: ToolRegistry | None = None,
        always_secret: tuple[str, ...] = ("OPENAI_API_KEY", "TEMPORAL_API_KEY"),
        mcp_pool: McpPool | None = None,
    ) -> None:
        self._spec_file = spec_file
        self._default_model = default_model
        self._registry = registry or REGISTRY
        self._always_secret = list(always_secret)
        self.mcp_pool = mcp_pool or McpPool()

    async def aclose(self) -> None:
        """Stop the MCP stdio servers this worker started."""
        await self.mcp_pool.aclose()

    @activity.defn(name=SPEC_RESOLVE)
    async def resolve_spec(self, req: ResolveSpecInput) -> PinnedSpec:
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
        except (SpecError, UnknownToolError, McpToolsError) as e:
            raise ApplicationError(str(e), type=ERR_SPEC_INVALID, non_retryable=True) from None
        if not Path(spec.workspace).is_dir():
            raise ApplicationError(
                f"agents.{req.agent}.workspace: {spec.workspace} is not a directory",
                type=ERR_SPEC_INVALID,
                non_retryable=True,
            )
        return PinnedSpec(
            spec=spec,
            tools=tools,
            spec_hash=spec_hash(spec, tools),
            source=str(path),
            workflow_rev=req.workflow_rev,
        )

    async def _pin_tools(self, spec: AgentSpec) -> list[ToolInfo]:
        """The worker's tools named by the spec, then every MCP server's (listed concurrently)."""
        tools = self._registry.infos(spec.tool_names())
        for info in tools:
            info.task_queue = spec.tool_queues.get(info.name)
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
            names = self._always_secret + spec.secrets + referenced_vars(server.pinned(name))
            msg = redact(f"agents.{spec.name}.mcp_servers.{name}: {e.message}", names)
            raise ApplicationError(msg, type=ERR_MCP_UNAVAILABLE) from None

    @activity.defn(name=TOOL_INVOKE)
    async def invoke_tool(self, req: InvokeToolInput) -> ToolOutcome:
        """Run one tool call; heartbeats while it runs and honours cancellation.

        Business errors (bad arguments, unknown tool, a ``ToolError``) come back as
        ``status="error"`` for the model; any other exception propagates so Temporal retries it.
        """
        bound = log.bind(
            run_id=req.run_id,
            turn=req.turn,
            tool=req.name,
            call_id=req.call_id,
            tenant_id=req.tenant_id,
        )
        ctx = ToolContext(
            workspace=Path(req.workspace),
            run_id=req.run_id,
            turn=req.turn,
            call_id=req.call_id,
            tenant_id=req.tenant_id,
            principal_id=req.principal_id,
        )  # the activity itself heartbeats while the tool runs (activities/heartbeat.py)
        started = time.perf_counter()
        run = (
            invoke_mcp(self.mcp_pool, req, timeout=None)
            if req.mcp is not None
            else self._registry.invoke(
                req.name, req.arguments, ctx, max_output_chars=req.max_output_chars
            )
        )
        try:
            outcome = await await_with_heartbeats(run, lambda ms: {"running_ms": ms})
        except asyncio.CancelledError:
            bound.info("tool_cancelled")
            raise
        except Exception as exc:
            bound.warning(
                "tool_infrastructure_error",
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
                error_type=type(exc).__name__,
                error=redact(str(exc), self._secret_names(req)),
            )
            if isinstance(exc, ApplicationError) and req.mcp is not None:
                msg = redact(exc.message, self._secret_names(req))
                raise ApplicationError(
                    msg, type=exc.type, non_retryable=exc.non_retryable
                ) from None
            raise
        outcome.content = redact(outcome.content, self._secret_names(req))
        bound.info(
            "tool_call",
            status=outcome.status,
            duration_ms=outcome.duration_ms,
            output_chars=outcome.output_chars,
            truncated=outcome.truncated,
        )
        return outcome

    def _secret_names(self, req: InvokeToolInput) -> list[str]:
        mcp_vars = referenced_vars(req.mcp.server) if req.mcp is not None else []
        return self._always_secret + list(req.secrets) + mcp_vars
