"""A worker process for the benchmarks: ``python -m bench.worker_proc --kind ours|plugin|bare ...``.

* ``ours``: ``workers.worker.build_worker`` (AgentRun and its activities), exactly as
  ``agentctl worker`` builds it, JSON logs as ``agentctl worker`` configures them.
* ``plugin``: ``PluginAgentRun`` with the OpenAI Agents plugin (bench/plugin_agent.py).
* ``bare``: ``BareTurns`` (bench/bare.py).
* ``hand``: ``HandLoop``, a hand-written agent loop (bench/handwritten.py).

``--tuning`` picks the worker options: ``ours`` (``WorkerTuning``, the shipped defaults), ``sdk``
(the Temporal SDK's defaults) or ``autoscale`` (``WorkerTuning`` plus autoscaling pollers).
The process writes ``--ready-file`` once the worker polls, and shuts down gracefully on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.worker import PollerBehaviorAutoscaling, Worker

from workers.worker import WorkerTuning

SDK_DEFAULTS: dict[str, Any] = {
    "max_concurrent_activities": None,  # 100 slots
    "max_concurrent_workflow_tasks": None,  # 100 slots
    "max_cached_workflows": 1000,
    "sticky_queue_schedule_to_start_timeout": timedelta(seconds=10),
    "graceful_shutdown_timeout": timedelta(0),
}


def tuning_options(name: str) -> dict[str, Any]:
    """Worker keyword arguments for a tuning name."""
    t = WorkerTuning
    ours = {
        "max_concurrent_activities": t.max_concurrent_activities,
        "max_concurrent_workflow_tasks": t.max_concurrent_workflow_tasks,
        "max_cached_workflows": t.max_cached_workflows,
        "sticky_queue_schedule_to_start_timeout": t.sticky_queue_schedule_to_start_timeout,
        "graceful_shutdown_timeout": t.graceful_shutdown_timeout,
    }
    if name == "ours":
        return ours
    if name == "sdk":
        return dict(SDK_DEFAULTS)
    if name == "autoscale":
        return {
            **ours,
            "workflow_task_poller_behavior": PollerBehaviorAutoscaling(),
            "activity_task_poller_behavior": PollerBehaviorAutoscaling(),
        }
    raise SystemExit(f"unknown tuning {name!r}")


async def _pydantic_worker(
    args: argparse.Namespace, opts: dict[str, Any], workflow: type, activities: list[Any]
) -> tuple[Any, Worker]:
    """A client with the pydantic converter and a worker of one workflow and its activities."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    client = await Client.connect(
        args.address, namespace="default", data_converter=pydantic_data_converter
    )
    worker = Worker(
        client, task_queue=args.task_queue, workflows=[workflow], activities=activities, **opts
    )
    return client, worker


def _host_settings() -> dict[str, str]:
    """Settings of one host under ``make chaos --two-hosts``, read from the environment.

    Each worker is a host of its own (``AGENT_HOME``) sharing the stores of many hosts
    (bench/chaos_hosts.py); unset, the settings of :func:`_build` stand.
    """
    return {
        field: os.environ[name]
        for name, field in (
            ("AGENT_HOME", "home"),
            ("AGENT_PAYLOAD_STORE", "payload_store"),
            ("AGENT_PAYLOAD_THRESHOLD_BYTES", "payload_threshold_bytes"),
            ("AGENT_S3_BUCKET", "s3_bucket"),
            ("AGENT_S3_PREFIX", "s3_prefix"),
        )
        if os.environ.get(name)
    }


async def _build(args: argparse.Namespace) -> tuple[Any, Worker]:
    from temporalio.client import Client

    opts = tuning_options(args.tuning)
    if args.kind == "ours":
        from bench.infra import converter_choice
        from workers.client import connect
        from workers.config import Settings
        from workers.worker import build_worker

        from_env = _host_settings()
        if args.payload_store:
            from_env["payload_store"] = args.payload_store
        settings = Settings(
            **from_env,
            temporal_address=args.address,
            task_queue=args.task_queue,
            openai_base_url=args.model_url,
            openai_api_key="bench",
            spec_file=args.spec_file,
            default_model="scripted",
            log_level=args.log_level,
            encryption_keys=os.environ.get("AGENT_ENCRYPTION_KEYS") or None,
            # make chaos gives its workers a memory store and a state folder of its own
            memory_url=os.environ.get("AGENT_MEMORY_URL") or None,
            **(
                {"state_dir": os.environ["AGENT_STATE_DIR"]}
                if os.environ.get("AGENT_STATE_DIR")
                else {}
            ),
            # AGENT_WORKFLOW_SANDBOX=true: measure what running without the sandbox buys
            workflow_sandbox=os.environ.get("AGENT_WORKFLOW_SANDBOX", "").lower() in ("1", "true"),
            **({"payload_dir": args.payload_dir} if args.payload_dir else {}),
        )
        conv, _ = converter_choice(settings)
        client = await connect(settings, data_converter=conv)
        return client, build_worker(client, settings, **opts)
    if args.kind == "plugin":
        from bench.plugin_agent import PluginAgentRun, calculator, make_plugin

        client = await Client.connect(
            args.address, namespace="default", plugins=[make_plugin(args.model_url)]
        )
        return client, Worker(
            client,
            task_queue=args.task_queue,
            workflows=[PluginAgentRun],
            activities=[calculator],
            **opts,
        )
    if args.kind == "bare":
        from bench.bare import BareTurns, bare_model, bare_tool

        return await _pydantic_worker(args, opts, BareTurns, [bare_model, bare_tool])
    if args.kind == "hand":
        from bench.handwritten import HandLoop, configure, hand_model, hand_tool

        configure(args.model_url)
        return await _pydantic_worker(args, opts, HandLoop, [hand_model, hand_tool])
    raise SystemExit(f"unknown kind {args.kind!r}")


async def _main(args: argparse.Namespace) -> None:
    client, worker = await _build(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        Path(args.ready_file).write_text("ready\n")
        print(
            f"bench worker {args.kind}/{args.tuning} polling {args.task_queue}",
            file=sys.stderr,
            flush=True,
        )
        await stop.wait()
    del worker, client  # no Client alive when the loop closes (crash at exit, notes)
    gc.collect()


def main() -> None:
    """Parse arguments, configure logging as ``agentctl worker`` does, run until SIGTERM."""
    p = argparse.ArgumentParser(prog="python -m bench.worker_proc")
    p.add_argument("--kind", choices=["ours", "plugin", "bare", "hand"], required=True)
    p.add_argument("--address", required=True)
    p.add_argument("--task-queue", required=True)
    p.add_argument("--model-url", required=True)
    p.add_argument("--spec-file", default=None)
    p.add_argument("--tuning", default="ours", choices=["ours", "sdk", "autoscale"])
    p.add_argument("--ready-file", required=True)
    p.add_argument("--log-level", default="info")
    p.add_argument(
        "--payload-dir", default=None, help="AGENT_PAYLOAD_DIR of the external payload store"
    )
    p.add_argument("--payload-store", default=None, help="AGENT_PAYLOAD_STORE: local, s3 or none")
    args = p.parse_args()
    if args.kind == "ours":
        from workers.logging_setup import configure_logging

        configure_logging(args.log_level, forward_core=True)
    else:
        import logging

        logging.basicConfig(
            level=getattr(logging, args.log_level.upper(), logging.INFO), stream=sys.stderr
        )
    if args.kind == "plugin":
        from agents import set_tracing_disabled

        set_tracing_disabled(True)
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
