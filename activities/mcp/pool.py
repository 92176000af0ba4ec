"""Connections of one worker to MCP servers (the official ``mcp`` SDK's :class:`mcp.Client`).

Stdio servers are started once and reused by every call that names the same settings (the pool
key is the sha256 of the pinned :class:`~activities.contracts.McpServerConfig` without its name);
a server whose process has died is started again by the next call, and so is one that does not
answer a question in time after a call of it was cancelled (timed out): a server that froze, or is still
sending a reply nobody waits for, would otherwise fail every later call. Streamable-HTTP servers get
one short connection per operation, so a restarted server or a load balancer in front of several
needs nothing from us. :meth:`McpPool.aclose` stops every server (worker shutdown).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import os
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TextIO, TypeVar, cast

import httpx2
import structlog

from activities.contracts import McpServerConfig
from activities.http_cap import cap_response_hook
from activities.mcp.config import expand, stdio_argv

# The ``mcp`` SDK (about 0.4 s to import) loads when a server is first started or reached, not
# with the worker: most agents use no MCP server (issue #35, worker start).
if TYPE_CHECKING:
    from mcp import Client
    from mcp.types import CallToolResult, RequestParamsMeta, Tool

log = structlog.get_logger("activities.mcp")

T = TypeVar("T")


STDERR_TAIL_LINES = 20
"""Lines of a stdio server's stderr kept to explain why it failed (errors carry the last ones)."""


class McpServerFailed(ConnectionError):
    """A stdio server did not answer its handshake in time, or exited before it did.

    The message names the server, says which, and ends with the last lines of its stderr.
    """


class _Stderr:
    """A pipe for a stdio server's stderr.

    Every line goes into the worker's JSON log as a field (event ``mcp_server_stderr``), and the
    last :data:`STDERR_TAIL_LINES` are kept for errors.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        r, w = os.pipe()
        self.writer: TextIO = os.fdopen(w, "w")
        self._reader = os.fdopen(r, "rb")
        self._task = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), self._reader
        )
        try:
            while line := await stream.readline():
                text = line.decode(errors="replace").rstrip()
                if text:
                    self.tail.append(text[:500])
                    log.info("mcp_server_stderr", server=self.name, line=text[:2000])
        finally:
            transport.close()

    def last_lines(self) -> str:
        """The kept lines, newest last (empty when the server wrote nothing)."""
        return "\n".join(self.tail)

    async def close(self) -> None:
        """Close our end of the pipe and read what is left (at most a second)."""
        with contextlib.suppress(OSError):
            self.writer.close()
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(asyncio.shield(self._task), timeout=1.0)
        self._task.cancel()


def pool_key(server: McpServerConfig) -> str:
    """sha256 (hex) of the server's connection settings; equal settings share one process."""
    body = server.model_dump(mode="json", exclude={"name"})
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class _StdioServer:
    """One running stdio server: a task owns the SDK client (its task groups) until ``stop``."""

    def __init__(self, server: McpServerConfig) -> None:
        self.server = server
        self.client: Client | None = None
        self.stderr = _Stderr(server.name)
        self._errlog = self.stderr.writer
        self._read: Any = None
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._own())

    @asynccontextmanager
    async def _transport(self) -> AsyncGenerator[tuple[Any, Any], None]:
        """The SDK's stdio transport, keeping its read stream to tell when the process is gone."""
        from mcp import StdioServerParameters, stdio_client

        argv = stdio_argv(self.server)
        params = StdioServerParameters(
            command=argv[0],
            args=argv[1:],
            env={k: expand(v) for k, v in self.server.env.items()},
            cwd=self.server.cwd,
            # bytes that are not UTF-8 on stdout: U+FFFD, so that line is skipped as unparsable
            # ("strict" killed the SDK's reader: the server stayed, and every call of it hung)
            encoding_error_handler="replace",
        )
        async with stdio_client(params, errlog=self._errlog) as (read, write):
            self._read = read
            yield read, write

    async def _own(self) -> None:
        from mcp import Client

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
        """Wait until the server answered the handshake (at most ``handshake_timeout_seconds``).

        Raises:
            McpServerFailed: no answer in time, or the process exited (with its stderr's tail).
        """
        name, limit = self.server.name, self.server.handshake_timeout_seconds
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout=limit)
        except TimeoutError:
            raise McpServerFailed(
                f"MCP server {name} did not answer the MCP handshake within {limit:g} s"
                + self._stderr_note()
            ) from None
        except Exception as exc:  # noqa: BLE001 - explained with what the server said
            await asyncio.sleep(0.1)  # let the last stderr lines arrive
            raise McpServerFailed(
                f"MCP server {name} exited before answering the handshake "
                f"({type(exc).__name__}: {str(exc)[:200]})" + self._stderr_note()
            ) from None
        if self.client is None:
            raise McpServerFailed(f"MCP server {name} stopped" + self._stderr_note())
        return self.client

    def _stderr_note(self) -> str:
        tail = self.stderr.last_lines()
        return f"; its stderr ends with:\n{tail}" if tail else "; it wrote nothing to stderr"

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
        """Close the client; the SDK closes stdin, then terminates the process tree.

        A server still in its handshake is cancelled: the SDK's transport then terminates it.
        """
        self._stop.set()
        if not self._ready.done():
            self._task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=10)
        except BaseException:  # noqa: BLE001 - shutting down anyway (cancelled, timed out)
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._task), timeout=5)
        await self.stderr.close()


MAX_HTTP_REPLY_BYTES = 32 * 1024 * 1024
"""Bytes of one HTTP response of an MCP server over HTTP at most (32 MiB, as a model's reply,
``activities/model_limits.py``): the SDK holds a body whole before it parses it, so a server
answering without end would take the worker's memory; a tool's output is cut to
``max_tool_output_chars`` (16,000 by default) anyway."""


class McpPool:
    """The MCP connections of one worker.

    Stdio servers' stderr goes into the worker's JSON log, a line an event
    (``mcp_server_stderr``, fields ``server`` and ``line``), never raw onto the worker's stderr.
    """

    def __init__(self, max_http_reply_bytes: int = MAX_HTTP_REPLY_BYTES) -> None:
        """A pool with no server started yet.

        Args:
            max_http_reply_bytes: bytes of one HTTP response of a server over HTTP at most
                (:data:`MAX_HTTP_REPLY_BYTES`); past it the call fails naming the server.
        """
        self._max_http_bytes = max_http_reply_bytes
        self._stdio: dict[str, _StdioServer] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self._checks: dict[str, asyncio.Task[None]] = {}  # pool key -> the check after a cancel
        self._lock = asyncio.Lock()

    def _retire(self, server: _StdioServer) -> None:
        """Stop a dead server in the background: its replacement need not wait for the cleanup."""
        task = asyncio.ensure_future(server.stop())
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def _stdio_client(self, server: McpServerConfig) -> Client:
        key = pool_key(server)
        check = self._checks.get(key)
        if check is not None:  # a call of it was cancelled: does it still answer?
            await asyncio.shield(check)
        async with self._lock:
            running = self._stdio.get(key)
            if running is not None and not running.alive:
                log.info("mcp_server_restart", server=server.name)
                self._retire(running)
                running = None
            if running is None:
                running = self._stdio[key] = _StdioServer(server)
        try:
            return await running.ready()
        except BaseException:
            # failed, timed out or this attempt was cancelled: never leave the process behind
            if self._stdio.get(key) is running:
                del self._stdio[key]
            self._retire(running)
            raise

    def _check_after_cancel(self, server: McpServerConfig, client: Client) -> None:
        """Ask the server something in the background; retire it if it does not answer in time.

        The next call of the same server waits for the check (:meth:`_stdio_client`), so it
        goes to a fresh server rather than to one about to be retired.
        """
        key = pool_key(server)
        if key in self._checks:
            return
        task = self._checks[key] = asyncio.ensure_future(self._answers_or_retire(server, client))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        task.add_done_callback(lambda _: self._checks.pop(key, None))

    async def _answers_or_retire(self, server: McpServerConfig, client: Client) -> None:
        """Retire the server unless it answers within ``handshake_timeout_seconds``.

        The question is ``tools/list`` (every tool server answers it; ``ping`` is gone from the
        protocol since 2026-07-28).
        """
        limit = server.handshake_timeout_seconds
        try:
            await asyncio.wait_for(client.list_tools(), timeout=limit)
            return
        except Exception as exc:  # noqa: BLE001 - timed out, closed, answered with an error
            error = f"{type(exc).__name__}: {exc}"[:300]
        key = pool_key(server)
        async with self._lock:
            running = self._stdio.get(key)
            if running is None or running.client is not client:
                return  # already replaced (or stopped)
            del self._stdio[key]
            self._retire(running)
        log.warning("mcp_server_unresponsive", server=server.name, timeout_s=limit, error=error)

    async def _with_client(
        self, server: McpServerConfig, op: Callable[[Client], Awaitable[T]]
    ) -> T:
        if server.command is not None:
            client = await self._stdio_client(server)
            try:
                return await op(client)
            except asyncio.CancelledError:  # the call timed out (or the run let go of it)
                self._check_after_cancel(server, client)
                raise
            except Exception:
                await self.discard_dead(server)
                raise
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        headers = {k: expand(v) for k, v in server.headers.items()}
        timeout = httpx2.Timeout(30.0, read=300.0)
        cap = cap_response_hook(self._max_http_bytes, f"MCP server {server.name}'s reply")
        hooks = {"response": [cap]}
        async with httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks=hooks) as http:
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
            lambda c: c.call_tool(
                tool,
                arguments,
                read_timeout_seconds=timeout_seconds,
                meta=cast("RequestParamsMeta", meta),
            ),
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
