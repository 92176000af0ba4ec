"""``GET /healthz`` and ``GET /metrics`` of a worker or of ``agentctl serve`` (``AGENT_METRICS_ADDRESS``).

One aiohttp application (:class:`MetricsEndpoint`) on its own address, separate from the run
console's, and open (no authentication): it is meant for the orchestrator's probes and the
Prometheus scraper, reached where only they reach (docs/deploying.md, docs/security.md).

``/healthz``: 200 and ``{"status": "polling", "task_queues": [...]}`` while every Temporal worker
of the process polls its task queue (``"serving"`` for the console); 503 and
``{"status": "starting" | "stopping" | "stopped" | "not_polling"}`` before, during and after
shutdown, or once a worker failed for good. See :class:`Health`.

``/metrics``: Prometheus text format 0.0.4, in one answer:

* the runtime's own series (prometheus_client's default registry): :mod:`activities.metrics`
  (model steps, tokens, cost, tool calls, sandbox seconds), :mod:`workers.run_counts` (runs by
  status, from visibility, refreshed at scrape time at most every
  ``AGENT_METRICS_RUN_COUNTS_SECONDS``) and prometheus_client's ``process_*`` / ``python_*``;
* the Temporal SDK's own series (``temporal_workflow_task_*``, ``temporal_activity_*``,
  ``temporal_request*``, ``temporal_worker_task_slots_*``, ...), exactly as the SDK's core
  exports them: the process's Temporal :class:`~temporalio.runtime.Runtime` is made with
  ``PrometheusConfig`` bound to a private port on 127.0.0.1 (:class:`SdkMetrics`), and each scrape
  reads that and appends it.

Why the SDK's own exporter and not its ``MetricBuffer``: the buffer hands every metric update to
Python, which would bucket histograms and keep counters itself. Measured here with the scripted
model, 20 runs of two model steps and one tool call each made 1,974 updates (99 per run: slot
gauges, request counters and latencies, poll and task latencies), all of it work on the worker's
event loop, whose CPU is what a run costs (docs/benchmarks.md), and a buffer that is not drained
in time drops updates. The core exporter costs the worker's Python nothing per update, keeps the
SDK's own names, units and buckets (its defaults: what a dashboard written for the SDK's
Prometheus exporter expects) and costs one loopback request per scrape.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import structlog
from aiohttp import web
from prometheus_client import REGISTRY, disable_created_metrics, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from temporalio.client import Client
from temporalio.runtime import LoggingConfig, PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from workers.config import Settings
from workers.http_site import http_url, listen, split_address
from workers.logging_setup import core_logging_config
from workers.run_counts import RunCounts

__all__ = [
    "HEALTH_PATH",
    "METRICS_PATH",
    "Health",
    "MetricsEndpoint",
    "SdkMetrics",
    "endpoint_from_settings",
    "split_address",
]

log = structlog.get_logger("workers.metrics_server")

HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
SDK_SCRAPE_TIMEOUT = 5.0
"""Seconds a scrape waits for the SDK's own exporter before it answers without its series."""
RUN_COUNTS_TIMEOUT = 8.0
"""Seconds a scrape waits for a refresh of the run counts before it answers the last ones."""

Phase = Literal["starting", "polling", "serving", "stopping", "stopped"]


class Health:
    """What ``/healthz`` answers: the process's phase and the workers it runs.

    A worker process goes ``starting`` -> ``polling`` (:meth:`polling`, once its Temporal workers
    are started) -> ``stopping`` -> ``stopped``; the console goes ``starting`` -> ``serving``.
    Ready (200) only while ``polling`` with every worker's ``is_running`` true, or ``serving``.
    """

    def __init__(self) -> None:
        self.phase: Phase = "starting"
        self._workers: list[Worker] = []

    def polling(self, workers: Iterable[Worker]) -> None:
        """The workers are started: ready while each of them runs."""
        self._workers = list(workers)
        self.phase = "polling"

    def answer(self) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, JSON body)`` of ``/healthz`` now."""
        queues = [w.task_queue for w in self._workers]
        if self.phase == "serving":
            return 200, {"status": "serving"}
        if self.phase == "polling":
            if all(w.is_running for w in self._workers):
                return 200, {"status": "polling", "task_queues": queues}
            down = [w.task_queue for w in self._workers if not w.is_running]
            return 503, {"status": "not_polling", "task_queues": down}
        return 503, {"status": self.phase}


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class SdkMetrics:
    """A Temporal runtime whose metrics the SDK's core exports on a private loopback port.

    Clients (and the workers built from them) made with ``runtime=`` this :attr:`runtime` report
    to it; :attr:`url` is the exporter's own ``/metrics``, read by :class:`MetricsEndpoint`.
    Counters keep the SDK's default names (no ``_total`` suffix) and durations are milliseconds,
    as Temporal's documentation and dashboards name them.
    """

    runtime: Runtime
    url: str

    @classmethod
    def start(cls, attempts: int = 3) -> SdkMetrics:
        """A new runtime with the exporter on a free port of 127.0.0.1.

        Its core log lines go where :func:`workers.logging_setup.configure_logging` sent those of
        the default runtime (forwarded to Python logging as JSON), else to the SDK's default.

        Raises:
            RuntimeError: the port was taken between its choice and its bind, ``attempts`` times.
        """
        error: Exception | None = None
        for _ in range(attempts):
            address = f"127.0.0.1:{_free_loopback_port()}"
            try:
                config = TelemetryConfig(
                    metrics=PrometheusConfig(bind_address=address),
                    logging=core_logging_config() or LoggingConfig.default,
                )
                return cls(Runtime(telemetry=config), f"http://{address}/metrics")
            except Exception as e:  # noqa: BLE001 - the core's bind error: try another port
                error = e
        raise RuntimeError(f"the Temporal SDK's metrics exporter could not bind: {error}")


class MetricsEndpoint:
    """The ``/healthz`` and ``/metrics`` server of one process.

    Args:
        address: ``host:port`` to listen on (``AGENT_METRICS_ADDRESS``); port 0 picks a free one
            (see :attr:`url` after :meth:`start`).
        sdk: the SDK's exporter whose series to append (None: the runtime's own series only).
        run_counts_seconds: how long run counts are reused (0: none are counted); they are
            counted once :meth:`watch` gave a client.
    """

    def __init__(
        self, address: str, sdk: SdkMetrics | None = None, run_counts_seconds: float = 15.0
    ) -> None:
        self.address = address
        self.sdk = sdk
        self.health = Health()
        self.url = ""
        self._every = run_counts_seconds
        self._counts: RunCounts | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    def client_options(self) -> dict[str, Any]:
        """Keywords for ``Client.connect`` / :func:`workers.client.connect`: the SDK's runtime."""
        return {"runtime": self.sdk.runtime} if self.sdk is not None else {}

    def watch(self, client: Client | None) -> None:
        """Count runs by status through ``client`` (its namespace) from now on; None: stop."""
        self._counts = RunCounts(client, self._every) if client and self._every > 0 else None

    async def start(self) -> str:
        """Listen; returns the base URL (``http://host:port``).

        Raises:
            OSError: the address is in use or cannot be bound.
        """
        disable_created_metrics()  # *_created series: OpenMetrics' idea, noise in text 0.0.4
        app = web.Application()
        app.router.add_get(HEALTH_PATH, self._healthz)
        app.router.add_get(METRICS_PATH, self._metrics)
        self._runner, host, bound = await listen(app, self.address)
        self.url = http_url(host or "0.0.0.0", bound)
        log.info("metrics_serving", url=self.url, sdk=self.sdk is not None)
        return self.url

    async def stop(self) -> None:
        """Stop listening (``/healthz`` answers nothing from then on)."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _request: web.Request) -> web.Response:
        status, body = self.health.answer()
        return web.json_response(body, status=status, headers={"Cache-Control": "no-store"})

    async def _metrics(self, _request: web.Request) -> web.Response:
        if self._counts is not None:
            try:
                await asyncio.wait_for(self._counts.refresh(), RUN_COUNTS_TIMEOUT)
            except TimeoutError:
                log.warning("run_counts_timed_out", seconds=RUN_COUNTS_TIMEOUT)
        parts = [generate_latest(REGISTRY)]
        if self.sdk is not None:
            parts.append(await self._sdk_text(self.sdk.url))
        return web.Response(
            body=b"".join(p if p.endswith(b"\n") or not p else p + b"\n" for p in parts),
            headers={"Content-Type": CONTENT_TYPE_PLAIN_0_0_4, "Cache-Control": "no-store"},
        )

    async def _sdk_text(self, url: str) -> bytes:
        """The SDK exporter's text (b"" when it does not answer: the scrape still succeeds)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=SDK_SCRAPE_TIMEOUT)
            )
        try:
            async with self._session.get(url) as resp:
                resp.raise_for_status()
                return await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning("sdk_metrics_unreadable", url=url, error=str(e)[:200])
            return b""


_sdk: list[SdkMetrics] = []


def endpoint_from_settings(settings: Settings) -> MetricsEndpoint | None:
    """The endpoint ``AGENT_METRICS_ADDRESS`` asks for, with the process's SDK exporter; else None.

    The SDK exporter (:class:`SdkMetrics`) is made once per process and shared: a client must be
    connected with :meth:`MetricsEndpoint.client_options` for its series to be in ``/metrics``.
    """
    if not settings.metrics_address:
        return None
    if not _sdk:
        _sdk.append(SdkMetrics.start())
    return MetricsEndpoint(settings.metrics_address, _sdk[0], settings.metrics_run_counts_seconds)
