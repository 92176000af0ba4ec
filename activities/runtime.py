"""Activities ``tool.invoke`` and ``spec.resolve``: running tools and pinning agent specs.

Both read worker-side configuration (the tool registry, the spec file), so they are methods of
:class:`RuntimeActivities`, built once per worker.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import structlog
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contracts import (
    ERR_SPEC_INVALID,
    SPEC_RESOLVE,
    TOOL_INVOKE,
    InvokeToolInput,
    ResolveSpecInput,
    ToolOutcome,
)
from activities.heartbeat import await_with_heartbeats
from activities.redaction import ALWAYS_SECRET, REDACTED, add_secret_names
from activities.spec import PinnedSpec, SpecError, resolve_agent, spec_hash
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
            ``OPENAI_API_KEY`` and ``TEMPORAL_API_KEY``), besides the spec's ``secrets:``.

    Secrets are redacted from everything an activity returns, raises, heartbeats or logs by
    :class:`activities.redaction.RedactingInterceptor`, which ``build_worker`` installs; tool
    output is redacted before it is truncated (``ToolRegistry.invoke``).
    """

    def __init__(
        self,
        spec_file: str,
        default_model: str,
        registry: ToolRegistry | None = None,
        always_secret: tuple[str, ...] = ALWAYS_SECRET,
    ) -> None:
        self._spec_file = spec_file
        self._default_model = default_model
        self._registry = registry or REGISTRY
        add_secret_names(always_secret)

    @activity.defn(name=SPEC_RESOLVE)
    async def resolve_spec(self, req: ResolveSpecInput) -> PinnedSpec:
        """Read, validate and hash one agent of the spec file.

        Raises:
            ApplicationError: non-retryable ``AgentSpecInvalid`` naming the file and field, or an
                unknown tool (with the available ones).
        """
        path = req.spec_file or self._spec_file
        try:
            spec = resolve_agent(path, req.agent, self._default_model)
            tools = self._registry.infos(spec.tools)
        except (SpecError, UnknownToolError) as e:
            raise ApplicationError(str(e), type=ERR_SPEC_INVALID, non_retryable=True) from None
        if not Path(spec.workspace).is_dir():
            raise ApplicationError(
                f"agents.{req.agent}.workspace: {spec.workspace} is not a directory",
                type=ERR_SPEC_INVALID,
                non_retryable=True,
            )
        return PinnedSpec(
            spec=spec, tools=tools, spec_hash=spec_hash(spec, tools), source=str(path)
        )

    @activity.defn(name=TOOL_INVOKE)
    async def invoke_tool(self, req: InvokeToolInput) -> ToolOutcome:
        """Run one tool call; heartbeats while it runs and honours cancellation.

        Business errors (bad arguments, unknown tool, a ``ToolError``) come back as
        ``status="error"`` for the model; any other exception propagates so Temporal retries it
        (as an ``ApplicationError`` of the same type name, redacted, by the worker's
        interceptor). The tool gets ``ctx.idempotency_key = "<workflow id>/<call id>"``.
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
            idempotency_key=f"{req.run_id}/{req.call_id}",  # run_id is the workflow id
        )  # the activity itself heartbeats while the tool runs (activities/heartbeat.py)
        started = time.perf_counter()
        try:
            outcome = await await_with_heartbeats(
                self._registry.invoke(
                    req.name, req.arguments, ctx, max_output_chars=req.max_output_chars
                ),
                lambda ms: {"running_ms": ms},
            )
        except asyncio.CancelledError:
            bound.info("tool_cancelled")
            raise
        except Exception as exc:
            bound.warning(
                "tool_infrastructure_error",
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
                error_type=type(exc).__name__,
                error=str(exc),  # redacted by the logging chain (activities/redaction.py)
            )
            raise
        bound.info(
            "tool_call",
            status=outcome.status,
            duration_ms=outcome.duration_ms,
            output_chars=outcome.output_chars,
            truncated=outcome.truncated,
        )
        return outcome
