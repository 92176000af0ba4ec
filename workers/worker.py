"""The worker process: polls the task queue and runs ``AgentRun`` and its activities.

``agentctl worker`` calls :func:`main`. Workers scale out by running more of them on the same task
queue. SIGTERM and SIGINT shut down gracefully: polling stops, running activities get
``graceful_shutdown`` seconds to finish, then are cancelled (Temporal retries them elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
from collections.abc import Coroutine
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import structlog
from temporalio.client import Client
from temporalio.worker import Worker

from activities.code_mode import CodeRunner
from activities.contracts import model_task_queue
from activities.evals.activity import EvalActivities
from activities.evals.contracts import EVAL_QUEUE_SUFFIX
from activities.memory.consolidation import MemoryActivities
from activities.memory.store_url import configure as configure_memory
from activities.model import ModelActivities
from activities.redaction import RedactingInterceptor
from activities.runtime import RuntimeActivities
from activities.spec import SpecError, load_rate_limits, load_spec_file
from activities.tokens import tokens_count
from activities.tools import load_tool_modules
from activities.tools.sandbox_tools import configure as configure_sandbox
from workers.config import STATE_DIR_DEFAULT, Settings, builtin_spec_file, load_settings
from workers.home import ensure_home_files
from workers.metrics_server import MetricsEndpoint, endpoint_from_settings
from workers.payloads.converter import build_file_store
from workers.payloads.encryption import codec_from_setting
from workers.sandbox import workflow_runner
from workers.versioning import deployment_config
from workflows.agent_run import AgentRun
from workflows.eval_suite import EvalSuite
from workflows.memory_consolidation import MemoryConsolidation

log = structlog.get_logger("workers.worker")

T = TypeVar("T")


class WorkerTuning:
    """Worker settings tuned for agent work (documented in the README, measured by ``make bench``).

    * ``max_concurrent_activities`` 1000: model and tool activities mostly wait on I/O.
    * ``max_concurrent_workflow_tasks`` 200 and ``max_cached_workflows`` 5000: many runs in flight
      stay in the sticky cache and replay rarely.
    * ``sticky_queue_schedule_to_start_timeout`` 3 s (SDK default 10 s): after a worker dies its
      runs' next workflow tasks move to the shared queue after 3 s instead of 10 s
      (docs/temporal-facts.md, crash recovery).
    """

    max_concurrent_activities = 1000
    max_concurrent_workflow_tasks = 200
    max_cached_workflows = 5000
    sticky_queue_schedule_to_start_timeout = timedelta(seconds=3)
    graceful_shutdown_timeout = timedelta(seconds=10)


def tool_modules_for(settings: Settings) -> list[str]:
    """Tool modules to import: ``AGENT_TOOL_MODULES`` plus the spec file's ``tool_modules``."""
    mods = list(settings.tool_modules)
    try:
        raw = load_spec_file(settings.spec_file)
        mods += [m for m in raw.get("tool_modules") or [] if m not in mods]
    except SpecError as e:
        log.warning("spec_file_unreadable", error=str(e))
    return mods


_ANNOUNCED: set[str] = set()


def project_import_path(settings: Settings) -> Path | None:
    """Put the folder of a project's spec file first on ``sys.path`` (once), and log it.

    A project of one's own (``agentctl init``) keeps its tools package beside its ``agents.yml``,
    which the worker uses when it is in the working folder or ``AGENT_SPEC_FILE`` names it; its
    ``tool_modules`` then import from that folder, wherever the worker was started. The built-in
    agents' file adds nothing. :func:`run_worker` calls it (the worker process), not
    :func:`build_worker`, so workers built in a test process leave ``sys.path`` alone.

    Returns:
        The folder added (or already there), or None for the built-in agents' spec file.
    """
    spec = Path(settings.spec_file).expanduser().resolve()
    if spec == builtin_spec_file(settings.home).expanduser().resolve():
        return None
    folder = spec.parent
    added = str(folder) not in sys.path
    if added:
        sys.path.insert(0, str(folder))
    if str(folder) not in _ANNOUNCED:  # once per process, though every worker of it asks
        _ANNOUNCED.add(str(folder))
        log.info("project_import_path", folder=str(folder), spec_file=str(spec), added=added)
    return folder


def model_rate_limits(settings: Settings) -> dict[str, float]:
    """Requests per second of each rate-limited model: the spec file's ``rate_limits``.

    Read once when the worker starts; an unreadable spec file or section is logged and means
    no model queues (the runs then cannot route to one either, as they pin the same file).
    """
    try:
        limits = load_rate_limits(load_spec_file(settings.spec_file))
    except SpecError as e:
        log.warning("rate_limits_unreadable", error=str(e))
        return {}
    return {model: limit.requests_per_second for model, limit in limits.items()}


def build_model_workers(
    client: Client,
    settings: Settings,
    limits: dict[str, float] | None = None,
    **overrides: Any,
) -> list[Worker]:
    """One worker per rate-limited model, serving ``model.complete`` on the model's own queue.

    Each polls :func:`activities.contracts.model_task_queue` (``<task queue>.model.<model>``)
    with ``max_task_queue_activities_per_second`` = the model's limit: Temporal's matching
    service dispatches at most that many of the queue's activities per second, whichever and
    however many workers poll it, so the limit holds across all workers.

    Args:
        client: the Temporal client.
        settings: the worker's settings (task queue, model endpoint, spec file).
        limits: model -> requests per second; the spec file's ``rate_limits`` when omitted.
        **overrides: any other :class:`~temporalio.worker.Worker` option.
    """
    limits = model_rate_limits(settings) if limits is None else limits
    if not limits:
        return []
    model = ModelActivities(
        settings.openai_base_url,
        settings.openai_api_key,
        memory_url=settings.memory_store_url,
        idle_seconds=settings.model_idle_timeout_seconds,
        max_reply_bytes=settings.model_max_reply_bytes,
    )
    workers = []
    for name, rps in sorted(limits.items()):
        options: dict[str, Any] = dict(
            task_queue=model_task_queue(settings.task_queue, name),
            activities=[model.model_complete],
            interceptors=[RedactingInterceptor()],  # secrets redacted, as on the main queue
            max_concurrent_activities=WorkerTuning.max_concurrent_activities,
            max_task_queue_activities_per_second=rps,
            graceful_shutdown_timeout=WorkerTuning.graceful_shutdown_timeout,
        )
        deployment = deployment_config(settings)
        if deployment is not None:
            options["deployment_config"] = deployment
        options.update(overrides)
        workers.append(Worker(client, **options))
    return workers


def build_workers(
    client: Client,
    settings: Settings,
    *,
    tools_only: bool = False,
    runtime: RuntimeActivities | None = None,
    live_url: str | None = None,
) -> list[Worker]:
    """Every worker a worker process runs: :func:`build_worker`, then :func:`build_model_workers`.

    A tools-only worker serves no model queue. With ``settings.eval_worker`` a second worker of
    the same code polls ``<task queue>.eval``, where evaluation suites run their children.
    ``live_url``: where this process's live channel is reached (``LiveServer.url``), published
    in every worker's identity (:func:`workers.live_server.identity_with`).
    """
    extra: dict[str, Any] = {}
    if live_url:
        from workers.live_server import identity_with

        extra["identity"] = identity_with(live_url)
    main = build_worker(client, settings, tools_only=tools_only, runtime=runtime, **extra)
    if tools_only:
        return [main]
    evals = []
    if settings.eval_worker:
        queue = settings.task_queue + EVAL_QUEUE_SUFFIX
        evals = [build_worker(client, settings, runtime=runtime, task_queue=queue, **extra)]
    return [main, *build_model_workers(client, settings, **extra), *evals]


def runtime_activities(settings: Settings) -> RuntimeActivities:
    """The tool and spec activities for ``settings``.

    A spec's workspace inside the runtime's own state folder (``AGENT_STATE_DIR``, ``AGENT_HOME``
    or the checkout's ``.agent-runtime``) is created on first use, so the default agent runs on a
    fresh clone (or a fresh install) before ``make demo`` has filled its workspace. Callback URLs
    are signed with the callback key (:mod:`workers.callback_keys`).
    """
    from workers import callback_keys

    own = (settings.state_dir, settings.home, STATE_DIR_DEFAULT)
    return RuntimeActivities(
        settings.spec_file,
        settings.default_model,
        own_dirs=own,
        callbacks=callback_keys.signer(settings),
    )


def local_activities(runtime: RuntimeActivities) -> list[Any]:
    """The activities ``AgentRun`` runs as local activities, on the worker of its workflow tasks.

    ``spec.resolve``, ``tool.invoke`` (for tools marked ``local``; docs/throughput.md) and
    ``guardrail.check`` (the user's messages, when the spec has ``input`` guardrails).

    A worker for workflow tasks only must still register these, or a run's first workflow task
    fails: ``build_worker(client, settings, activities=local_activities(runtime),
    no_remote_activities=True)`` (the Temporal worker option that polls no activity tasks).
    """
    return [runtime.spec_resolve, runtime.tool_invoke, runtime.guardrail_check]


def _all_activities(settings: Settings, runtime: RuntimeActivities) -> list[Any]:
    """Every activity a full worker serves: model, spec, tools, tokens, code, evals, memory.

    Builds the model, eval, memory and Code Mode activity objects from ``settings`` (the model
    endpoint, the memory store, the state folder); ``runtime`` gives the spec and tool ones.
    """
    model = ModelActivities(
        settings.openai_base_url,
        settings.openai_api_key,
        memory_url=settings.memory_store_url,
        tools=runtime.run_first,  # local tools' calls riding the next model step
        idle_seconds=settings.model_idle_timeout_seconds,
        max_reply_bytes=settings.model_max_reply_bytes,
    )
    evals = EvalActivities(settings.openai_base_url, settings.openai_api_key)
    memory = MemoryActivities(
        settings.openai_base_url,
        settings.openai_api_key,
        settings.state_dir,
        memory_url=settings.memory_store_url,  # PostgreSQL: the pending runs are shared too
    )
    code = CodeRunner(Path(settings.state_dir).expanduser() / "code-mode")
    return [
        model.model_complete,
        model.policy_judge,
        runtime.spec_resolve,
        runtime.tool_invoke,
        runtime.guardrail_check,
        tokens_count,
        code.code_step,
        evals.score,
        evals.judge,
        memory.handoff,
        memory.consolidate,
    ]


def build_worker(
    client: Client,
    settings: Settings,
    *,
    tools_only: bool = False,
    runtime: RuntimeActivities | None = None,
    **overrides: Any,
) -> Worker:
    """A :class:`temporalio.worker.Worker` with every workflow and activity of the runtime.

    Args:
        client: the Temporal client.
        settings: the worker's settings (task queue, spec file, tool modules, model endpoint).
        tools_only: serve only ``tool.invoke`` (no workflows, no model, no spec): a worker for
            the tools a spec puts on their own queue (``tools: [{name, task_queue}]``, or
            ``mcp_servers.NAME.task_queue``).
        runtime: the tool and spec activities (a new :class:`RuntimeActivities` when omitted);
            pass one to stop its MCP servers with :meth:`RuntimeActivities.aclose` afterwards.
        **overrides: any other :class:`~temporalio.worker.Worker` option.
    """
    load_tool_modules(tool_modules_for(settings))
    configure_memory(settings.memory_store_url)
    configure_sandbox(
        Path(settings.state_dir) / "sandbox",
        store=build_file_store(settings),  # the bucket with AGENT_PAYLOAD_STORE=s3
        codec=codec_from_setting(settings.encryption_keys),
    )
    runtime = runtime or runtime_activities(settings)
    activities: list[Any] = [runtime.tool_invoke]
    workflows: list[Any] = []
    if not tools_only:
        activities = _all_activities(settings, runtime)
        workflows = [AgentRun, EvalSuite, MemoryConsolidation]
    t = WorkerTuning
    options: dict[str, Any] = dict(
        task_queue=settings.task_queue,
        workflows=workflows,
        activities=activities,
        # Secrets are redacted from every result, error, heartbeat of an activity (one place).
        interceptors=[RedactingInterceptor()],
        workflow_runner=workflow_runner(settings.workflow_sandbox),
        max_concurrent_activities=t.max_concurrent_activities,
        max_concurrent_workflow_tasks=t.max_concurrent_workflow_tasks,
        max_cached_workflows=t.max_cached_workflows,
        sticky_queue_schedule_to_start_timeout=t.sticky_queue_schedule_to_start_timeout,
        graceful_shutdown_timeout=t.graceful_shutdown_timeout,
    )
    deployment = deployment_config(settings)
    if deployment is not None:  # Worker Versioning (AGENT_WORKER_VERSIONING, docs/upgrades.md)
        options["deployment_config"] = deployment
    extra = list(overrides.pop("interceptors", None) or [])
    options.update(overrides)
    options["interceptors"] = [*options["interceptors"], *extra]  # redaction always stays
    return Worker(client, **options)


async def run_worker(
    settings: Settings | None = None,
    client: Client | None = None,
    tools_only: bool = False,
    *,
    stop: asyncio.Event | None = None,
    metrics: MetricsEndpoint | None = None,
) -> None:
    """Run a worker until SIGTERM or SIGINT, then shut down gracefully (MCP servers stopped).

    With ``AGENT_METRICS_ADDRESS`` set, ``GET /healthz`` and ``GET /metrics`` are served there
    from before the connection to Temporal until the worker stopped (:mod:`workers.metrics_server`):
    ``/healthz`` answers 200 only while the workers poll. Installed, the built-in agents are
    written into ``AGENT_HOME`` first (:func:`workers.home.ensure_home_files`); a project's
    folder goes on the import path (:func:`project_import_path`).

    Args:
        settings: the settings (default :func:`load_settings`).
        client: a connected client (default: :func:`workers.client.connect`, on the metrics
            endpoint's Temporal runtime when there is one).
        tools_only: serve only ``tool.invoke`` (see :func:`build_worker`).
        stop: set to stop (besides SIGTERM and SIGINT).
        metrics: a started endpoint to report to, which the caller stops (default: the one
            ``AGENT_METRICS_ADDRESS`` asks for, started and stopped here).
    """
    from workers.client import connect

    settings = settings or load_settings()
    for written in ensure_home_files(settings):  # installed: the built-in agents into AGENT_HOME
        log.info("home_file_written", path=str(written))
    project_import_path(settings)  # a project's tools package, beside its agents.yml
    own_metrics = metrics is None
    metrics = metrics or endpoint_from_settings(settings)
    if metrics is not None and own_metrics:
        await metrics.start()
    try:
        client = client or await connect(settings, **(metrics.client_options() if metrics else {}))
        if metrics is not None:
            metrics.watch(client)
        await _serve(settings, client, tools_only, stop or asyncio.Event(), metrics)
    finally:
        if metrics is not None:
            metrics.health.phase = "stopped"
            metrics.watch(None)
            if own_metrics:
                await metrics.stop()
    # Drop the client (and the workers holding it) before the event loop closes: a Temporal client
    # still alive at interpreter exit crashed the process in 6 of 20 tries (docs/temporal-facts.md).
    del client
    gc.collect()
    log.info("worker_stopped")


async def _serve(
    settings: Settings,
    client: Client,
    tools_only: bool,
    stop: asyncio.Event,
    metrics: MetricsEndpoint | None,
) -> None:
    """Poll until ``stop`` is set or a signal comes; ``metrics.health`` follows the workers."""
    from workers.live_server import LiveServer  # aiohttp: where it is used

    runtime = runtime_activities(settings)
    live = LiveServer.from_settings(settings)  # the live channel (docs/live-runs.md)
    live_url = await live.start() if live is not None else None
    try:
        await _poll(settings, client, tools_only, stop, metrics, runtime, live_url)
    finally:
        if live is not None:
            await live.stop()


async def _poll(
    settings: Settings,
    client: Client,
    tools_only: bool,
    stop: asyncio.Event,
    metrics: MetricsEndpoint | None,
    runtime: RuntimeActivities,
    live_url: str | None,
) -> None:
    """:func:`_serve`'s polling, with the live channel (if any) reached at ``live_url``."""
    workers = build_workers(
        client, settings, tools_only=tools_only, runtime=runtime, live_url=live_url
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "worker_started",
        task_queue=settings.task_queue,
        tools_only=tools_only,
        temporal=settings.temporal_address,
        model_endpoint=settings.openai_base_url,
        spec_file=settings.spec_file,
        model_queues=[w.task_queue for w in workers[1:]],
        metrics=metrics.url if metrics is not None else None,
        live=live_url,
    )
    try:
        async with contextlib.AsyncExitStack() as stack:
            for w in workers:
                await stack.enter_async_context(w)
            if metrics is not None:
                await _until_polling(workers, stop)
                metrics.health.polling(workers)
            await stop.wait()
            if metrics is not None:
                metrics.health.phase = "stopping"
            log.info("worker_stopping")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    await runtime.aclose()


async def _until_polling(workers: list[Worker], stop: asyncio.Event) -> None:
    """Wait until every worker runs (``is_running``: validated, pollers started) or ``stop``.

    A worker that cannot start raises out of its ``async with`` (the SDK cancels this task).
    """
    while not stop.is_set() and not all(w.is_running for w in workers):
        await asyncio.sleep(0.05)


LEFTOVER_TASK_SECONDS = 5.0
"""Seconds the tasks still running after the worker stopped get to end once cancelled."""


def run_to_end(main: Coroutine[Any, Any, T], leftover_seconds: float = LEFTOVER_TASK_SECONDS) -> T:
    """``asyncio.run(main)``, except that it never waits for good on a task that will not end.

    Once ``main`` is done, every task still running is cancelled and given ``leftover_seconds``
    to end; any that has not (an async tool that swallows ``CancelledError``, left behind when
    its call timed out) is logged as ``tasks_left_running`` and abandoned with the event loop.
    ``asyncio.run`` waited for it: the worker process never exited after SIGTERM.

    Returns:
        What ``main`` returned.

    Raises:
        BaseException: whatever ``main`` raised.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main)
    finally:
        try:
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                wait = asyncio.wait(tasks, timeout=leftover_seconds)
                _, pending = loop.run_until_complete(wait)
                if pending:
                    names = sorted({t.get_name() for t in pending})[:20]
                    log.warning("tasks_left_running", count=len(pending), tasks=names)
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
