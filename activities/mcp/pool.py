"""Connections of one worker to MCP servers (the official ``mcp`` SDK's :class:`mcp.Client`).

Stdio servers are started once and reused by every call that names the same settings (the pool
key is the sha256 of the pinned :class:`~activities.contracts.McpServerConfig` without its name);
a server whose process has died is started again by the next call. Streamable-HTTP servers get
one short connection per operation, so a restarted server or a load balancer in front of several
needs nothing from us. :meth:`McpPool.aclose` stops every server (worker shutdown).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TextIO, TypeVar

import httpx2
import structlog
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, Tool

from activities.contracts import McpServerConfig
from activities.mcp.config import expand, stdio_argv

log = structlog.get_logger("activities.mcp")

T = TypeVar("T")


def pool_key(server: McpServerConfig) -> str:
    """sha256 (hex) of the server's connection settings; equal settings share one process."""
    body = server.model_dump(mode="json", exclude={"name"})
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class _StdioServer:
    """One running stdio server: a task owns the SDK client (its task groups) until ``stop``."""

    def __init__(self, server: McpServerConfig, errlog: TextIO) -> None:
        self.server = server
        self.client: Client | None = None
        self._errlog = errlog
        self._read: Any = None
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._own())

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        """The SDK's stdio transport, keeping its read stream to tell when the process is gone."""
        argv = stdio_argv(self.server)
        params = StdioServerParameters(
            command=argv[0],
            args=argv[1:],
            env={k: expand(v) for k, v in self.server.env.items()},
            cwd=self.server.cwd,
        )
        async with stdio_client(params, errlog=self._errlog) as (read, write):
            self._read = read
            yield read, write

    async def _own(self) -> None:
        try:
            async with Client(self._transport(), cache=None) as client:
                self.client = client
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            if not self._ready.done():
                self._ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("mcp_server_closed", server=self.server.name, error=repr(exc)[:300])
        finally:
            self.client = None

    async def ready(self) -> Client:
        """Wait until the server answered the handshake; raises what starting it raised."""
        await asyncio.shield(self._ready)
        if self.client is None:
            raise ConnectionError(f"MCP server {self.server.name} stopped")
        return self.client

    @property
    def alive(self) -> bool:
        """Started, not stopped, and its stdout still open (the process has not exited)."""
        if self._task.done() or self._stop.is_set():
            return False
        if not self._ready.done():
            return True
        stats = self._read.statistics() if self._read is not None else None
        return self.client is not None and stats is not None and stats.open_send_streams > 0

    async def stop(self) -> None:
        """Close the client; the SDK closes stdin, then terminates the process tree."""
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=10)
        except Exception:  # noqa: BLE001 - shutting down anyway (TimeoutError included)
            self._task.cancel()


class McpPool:
    """The MCP connections of one worker.

    Args:
        errlog: where stdio servers' stderr goes (default: the worker's stderr).
    """

    def __init__(self, errlog: TextIO | None = None) -> None:
        self._errlog = errlog or sys.stderr
        self._stdio: dict[str, _StdioServer] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    def _retire(self, server: _StdioServer) -> None:
        """Stop a dead server in the background: its replacement need not wait for the cleanup."""
        task = asyncio.ensure_future(server.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _stdio_client(self, server: McpServerConfig) -> Client:
        key = pool_key(server)
        async with self._lock:
            running = self._stdio.get(key)
            if running is not None and not running.alive:
                log.info("mcp_server_restart", server=server.name)
                self._retire(running)
                running = None
            if running is None:
                running = self._stdio[key] = _StdioServer(server, self._errlog)
        try:
            return await running.ready()
        except BaseException:
            if self._stdio.get(key) is running:
                del self._stdio[key]
            raise

    async def _with_client(
        self, server: McpServerConfig, op: Callable[[Client], Awaitable[T]]
    ) -> T:
        if server.command is not None:
            client = await self._stdio_client(server)
            try:
                return await op(client)
            except Exception:
                await self.discard_dead(server)
                raise
        headers = {k: expand(v) for k, v in server.headers.items()}
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            transport = streamable_http_client(expand(server.url or ""), http_client=http)
            async with Client(transport, cache=None) as client:
                return await op(client)

    async def list_tools(self, server: McpServerConfig) -> list[Tool]:
        """Every tool the server offers now (all pages).

        Raises:
            Exception: the server cannot be started or reached (``OSError``, ``httpx2`` errors,
                ``MCPError``, an ``ExceptionGroup`` of those), or a ``${VAR}`` is not set.
        """

        async def op(client: Client) -> list[Tool]:
            tools: list[Tool] = []
            cursor: str | None = None
            for _ in range(100):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            return tools

        return await self._with_client(server, op)

    async def call_tool(
        self,
        server: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        meta: dict[str, Any],
        timeout_seconds: float | None = None,
    ) -> CallToolResult:
        """Call one tool; ``meta`` travels in the request's ``_meta``.

        Raises:
            Exception: as :meth:`list_tools`; ``MCPError`` also for a protocol-level error the
                server answered (unknown tool, ...).
        """
        return await self._with_client(
            server,
            lambda c: c.call_tool(tool, arguments, read_timeout_seconds=timeout_seconds, meta=meta),
        )

    async def discard_dead(self, server: McpServerConfig) -> None:
        """Forget the server's process if it has died (the next call starts a new one)."""
        key = pool_key(server)
        async with self._lock:
            running = self._stdio.get(key)
            if running is not None and not running.alive:
                del self._stdio[key]
                self._retire(running)

    def running(self) -> int:
        """How many stdio servers this worker has running."""
        return sum(1 for s in self._stdio.values() if s.alive)

    async def aclose(self) -> None:
        """Stop every stdio server (the worker is shutting down)."""
        async with self._lock:
            servers, self._stdio = list(self._stdio.values()), {}
        await asyncio.gather(*(s.stop() for s in servers), *self._stopping, return_exceptions=True)
