"""Start a worker's own aiohttp application on a ``host:port`` address (``AGENT_*_ADDRESS``).

The one way :mod:`workers.metrics_server` (``/healthz``, ``/metrics``) and
:mod:`workers.live_server` (``/live/{run_id}``) listen: :func:`split_address` reads the address,
:func:`listen` binds it and :func:`http_url` writes the URL others reach it at.
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["http_url", "listen", "split_address"]


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
