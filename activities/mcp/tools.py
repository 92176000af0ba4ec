"""MCP tools pinned at run start (``spec.resolve``) and called through ``tool.invoke``.

Pinning reads each server's tool list once and turns it into :class:`ToolInfo` entries that carry
the server's JSON schemas and an :class:`McpTarget`; the workflow keeps them with the spec, so a
replay never asks a server anything. A call:

* a server that cannot be started or reached, a closed connection or a timed-out request raise
  ``ApplicationError(type="McpServerUnavailable")``, retryable: Temporal tries again (the next
  attempt starts a dead stdio server again) and, when the attempts are spent, the model is told;
* a tool error (``isError``) or a protocol error the server answered (unknown tool, bad
  parameters) comes back as ``status="error"``, for the model to read and act on; so does an
  HTTP reply past :data:`activities.mcp.pool.MAX_HTTP_REPLY_BYTES` (not read further, not retried).

The request's ``_meta`` carries ``{"idempotency_key": "<workflow id>/<tool_call_id>"}``, the same
for every attempt of one call, so a server with side effects can deduplicate.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any, cast

from temporalio.exceptions import ApplicationError

from activities.contracts import (
    ERR_MCP_UNAVAILABLE,
    InvokeToolInput,
    McpServerConfig,
    McpTarget,
    ToolInfo,
    ToolOutcome,
)
from activities.http_cap import ReplyTooLarge
from activities.mcp.config import McpServerSpec, tool_name
from activities.mcp.pool import McpPool
from activities.tools import output

# the ``mcp`` SDK loads where a server's tools or results are handled (see activities/mcp/pool.py)
if TYPE_CHECKING:
    from mcp.types import CallToolResult, Tool


class McpToolsError(ValueError):
    """A server's tool list does not fit the spec (a named tool is missing, two names collide)."""


def idempotency_key(req: InvokeToolInput) -> str:
    """``<workflow id>/<tool_call_id>``: stable across attempts, worker crashes, continue-as-new."""
    return f"{req.run_id}/{req.call_id}"


def unavailable(server: McpServerConfig, exc: BaseException) -> ApplicationError:
    """The retryable error of a server that cannot be started, reached or kept connected."""
    return ApplicationError(
        f"MCP server {server.name} is unavailable: {_describe(exc)}",
        type=ERR_MCP_UNAVAILABLE,
    )


def _describe(exc: BaseException) -> str:
    parts = _group_parts(exc)
    if parts:
        return "; ".join(_describe(e) for e in parts)
    return f"{type(exc).__name__}: {exc}"[:500]


def _group_parts(exc: BaseException) -> tuple[BaseException, ...]:
    """The exceptions of an exception group; ``()`` for any other exception."""
    if isinstance(exc, BaseExceptionGroup):
        return cast("BaseExceptionGroup[BaseException]", exc).exceptions
    return ()


def _too_large(exc: BaseException) -> ReplyTooLarge | None:
    """The :class:`ReplyTooLarge` in ``exc`` (the SDK raises it inside an exception group)."""
    if isinstance(exc, ReplyTooLarge):
        return exc
    return next((t for e in _group_parts(exc) if (t := _too_large(e)) is not None), None)


def _risk(spec: McpServerSpec, tool: Tool) -> Any:
    if spec.risk is not None:
        return spec.risk
    return "read" if tool.annotations and tool.annotations.read_only_hint else "write"


async def pin_server_tools(pool: McpPool, name: str, spec: McpServerSpec) -> list[ToolInfo]:
    """Read the server's tools once and pin them as :class:`ToolInfo` (named ``name__tool``).

    Raises:
        ApplicationError: retryable ``McpServerUnavailable`` when the server cannot be reached.
        McpToolsError: ``spec.tools`` names a tool the server lacks, or two names collide.
    """
    server = spec.pinned(name)
    try:
        tools = await pool.list_tools(server)
    except Exception as exc:
        raise unavailable(server, exc) from None
    by_name = {t.name: t for t in tools}
    if spec.tools is not None:
        missing = [t for t in spec.tools if t not in by_name]
        if missing:
            raise McpToolsError(
                f"mcp_servers.{name}.tools: server {name} has no tool(s) {', '.join(missing)}; "
                f"it offers: {', '.join(sorted(by_name)) or 'none'}"
            )
        tools = [by_name[t] for t in spec.tools]
    infos: dict[str, ToolInfo] = {}
    for tool in tools:
        offered = tool_name(name, tool.name)
        if offered in infos:
            prev = infos[offered].mcp
            raise McpToolsError(
                f"mcp_servers.{name}: tools {prev.tool if prev else ''!r}"
                f" and {tool.name!r} would both be offered as {offered}"
            )
        infos[offered] = ToolInfo(
            name=offered,
            description=tool.description or tool.title or f"{tool.name} (MCP server {name})",
            parameters=tool.input_schema,
            timeout_seconds=spec.timeout_seconds,
            max_attempts=spec.max_attempts,
            risk=_risk(spec, tool),
            task_queue=spec.task_queue,
            mcp=McpTarget(server=server, tool=tool.name),
        )
    return list(infos.values())


def result_text(result: CallToolResult) -> str:
    """The tool result as text for the model: text blocks as they are, others as short notes."""
    from mcp.types import EmbeddedResource, ImageContent, ResourceLink, TextContent

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            parts.append(f"[image: {block.mime_type}]")
        elif isinstance(block, EmbeddedResource):
            text = getattr(block.resource, "text", None)
            parts.append(text if text is not None else f"[resource: {block.resource.uri}]")
        elif isinstance(block, ResourceLink):
            parts.append(f"[resource link: {block.uri}]")
        else:
            parts.append(f"[{getattr(block, 'type', 'content')}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts)


def _arguments(raw: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw.strip() or "{}")
    except json.JSONDecodeError as e:
        raise ValueError(
            f"the arguments are not valid JSON ({e.msg}); send one JSON object"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(f"the arguments must be a JSON object, not {type(value).__name__}")
    return cast("dict[str, Any]", value)


async def _call(
    pool: McpPool,
    req: InvokeToolInput,
    target: McpTarget,
    arguments: dict[str, Any],
    timeout: float | None,
) -> tuple[Any, str]:
    from mcp.shared.exceptions import MCPError
    from mcp.types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    meta = {"idempotency_key": idempotency_key(req)}
    try:
        result = await pool.call_tool(target.server, target.tool, arguments, meta, timeout)
    except MCPError as e:
        if e.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):  # retryable
            raise unavailable(target.server, e) from None
        return "error", f"Error: MCP server {target.server.name} answered {e.code}: {e.message}"
    except Exception as e:  # cannot start, unreachable (httpx2, OSError), unset ${VAR}, ...
        too_large = _too_large(e)
        if too_large is not None:  # the server answered: running the tool again changes nothing
            return "error", f"Error: {too_large}"
        raise unavailable(target.server, e) from None
    text = result_text(result)
    if result.is_error:
        return "error", f"Error: {text or 'the tool reported an error'}"
    return "ok", text


async def invoke_mcp(pool: McpPool, req: InvokeToolInput, timeout: float | None) -> ToolOutcome:
    """Run one call of an MCP tool (``req.mcp`` set) and shape it as a :class:`ToolOutcome`.

    Args:
        pool: the worker's connections.
        req: the call; ``req.mcp`` names the server and the server's tool.
        timeout: seconds to wait for the server's answer (None: the SDK's default).

    Raises:
        ApplicationError: retryable ``McpServerUnavailable`` (see the module docstring).
    """
    assert req.mcp is not None
    target = req.mcp
    started = time.perf_counter()
    status: Any = "ok"
    recorded: dict[str, Any] | None = None
    try:
        recorded = _arguments(req.arguments)
    except ValueError as e:
        status, text = "error", f"Error: {e}"
    else:
        status, text = await _call(pool, req, target, recorded, timeout)
    # redacted before the cut (no secret leaks in part), lone surrogates replaced
    content, truncated, full_chars = output.shape(text, req.max_output_chars)
    return ToolOutcome(
        call_id=req.call_id,
        name=req.name,
        status=status,
        content=content,
        truncated=truncated,
        output_chars=full_chars,
        duration_ms=(time.perf_counter() - started) * 1000.0,
        arguments=recorded,
    )
