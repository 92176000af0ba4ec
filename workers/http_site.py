"""Start a worker's own aiohttp application on a ``host:port`` address (``AGENT_*_ADDRESS``).

The one way :mod:`workers.metrics_server` (``/healthz``, ``/metrics``) and
:mod:`workers.live_server` (``/live/{run_id}``) listen: :func:`split_address` reads the address,
:func:`listen` binds it and :func:`http_url` writes the URL others reach it at. And the one way
the live channel and the run console (``/runs/{id}/events``, AG-UI) open a Server-Sent Events
answer: :func:`open_sse`.
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["SSE_HEADERS", "http_url", "listen", "open_sse", "split_address"]

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
"""Headers of a Server-Sent Events answer: the media type (WHATWG HTML "Server-sent events"), no
cache, and ``X-Accel-Buffering: no`` so that a proxy such as nginx passes each event on at once."""


def split_address(address: str) -> tuple[str | None, int]:
    """``"host:port"`` -> ``(host, port)``; ``":9464"``: every interface (host None).

    ``"[::1]:9464"`` -> ``("::1", 9464)``.

    Raises:
        ValueError: no port.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    host = host.strip("[]")
    return host or None, int(port)


async def listen(app: web.Application, address: str) -> tuple[web.AppRunner, str | None, int]:
    """Serve ``app`` at ``address`` (``host:port``; port 0: a free one).

    No access log; a stop waits at most 1 s for requests under way.

    Returns:
        ``(runner, host, port)``: the runner to ``cleanup()`` on stop, the host asked for (None:
        every interface) and the port bound.

    Raises:
        ValueError: ``address`` has no port.
        OSError: the address is in use or cannot be bound (the runner is cleaned up).
    """
    host, port = split_address(address)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, host, runner.addresses[0][1]


def http_url(host: str, port: int) -> str:
    """``http://host:port``, an IPv6 host in brackets (``http://[::1]:9464``)."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


async def open_sse(
    request: web.Request, headers: dict[str, str] | None = None
) -> web.StreamResponse:
    """Start ``request``'s answer as Server-Sent Events (:data:`SSE_HEADERS` and ``headers``).

    Returns:
        The prepared response (its headers sent): write the events to it.
    """
    resp = web.StreamResponse(headers={**SSE_HEADERS, **(headers or {})})
    await resp.prepare(request)
    return resp
