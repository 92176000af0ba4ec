"""What the benchmark scenarios share: options, settings, starting runs and workers of each kind.

Implementations compared: ``ours`` (``AgentRun``, built by ``workers.worker.build_worker``),
``plugin`` (the OpenAI Agents SDK on ``temporalio-openai-agents``, bench/plugin_agent.py),
``hand`` (a hand-written loop, bench/handwritten.py) and, for the overhead scenario, ``bare``
(two trivial activities per turn, bench/bare.py). Each scenario returns a JSON-able dict and
cleans up its servers and workers; the scenarios by name are in :mod:`bench.scenarios`.
"""

from __future__ import annotations

import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client

from bench.infra import (
    DevServer,
    WorkerProc,
    spawn_worker,
)
from workers.client import start_run
from workers.config import Settings
from workers.testing.scripted_model import ScriptedModel
from workflows.models import RunRequest

MODEL_TYPE = {"ours": "model.complete", "plugin": "invoke_model_activity", "bare": "bench.model"}
TOOL_TYPE = {"ours": "tool.invoke", "plugin": "calculator", "bare": "bench.tool"}


@dataclass
class Options:
    """Command-line options every scenario sees."""

    quick: bool = False
    extended: bool = False
    log: Any = print
    baseline: str | None = None
    """Another checkout of this project: scenario ``cpu`` runs its ``AgentRun`` beside ours."""


def _err(e: BaseException) -> dict[str, Any]:
    return {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=6)}


def _settings(
    model_url: str, spec: Path | None, d: Path, payload_store: str | None = None
) -> Settings:
    """Settings of the bench client; the external payload store (if any) lives in ``d``."""
    extra: dict[str, Any] = {}
    if "payload_dir" in Settings.model_fields:
        extra["payload_dir"] = str(d / "payloads")
    if payload_store and "payload_store" in Settings.model_fields:
        extra["payload_store"] = payload_store
    return Settings(
        openai_base_url=model_url,
        openai_api_key="bench",
        spec_file=str(spec) if spec else "",
        task_queue="bench",
        default_model="scripted",
        **extra,
    )


def _tq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def plugin_missing() -> str | None:
    """Why the plugin rows cannot run (package not installed), or None when they can."""
    try:
        import temporalio.openai_agents  # noqa: F401

        import agents  # noqa: F401
    except ImportError as e:
        return (
            f"temporalio-openai-agents is not installed ({e}); "
            "pip install 'temporalio-openai-agents==1.1.0' (bench/README.md)"
        )
    return None


async def _plugin_client(srv: DevServer, model_url: str) -> Client:
    from bench.plugin_agent import make_plugin

    return await Client.connect(srv.address, namespace="default", plugins=[make_plugin(model_url)])


async def _start_plugin(client: Client, task_queue: str, turns: int, wid: str | None = None) -> Any:
    from bench.plugin_agent import PluginAgentRun, PluginRequest

    return await client.start_workflow(
        PluginAgentRun.run,
        PluginRequest(input=f"turns={turns} go", max_turns=turns + 5),
        id=wid or f"plugin-{uuid.uuid4().hex}",
        task_queue=task_queue,
    )


async def _start_ours(client: Client, task_queue: str, turns: int, wid: str | None = None) -> Any:
    return await start_run(
        client,
        RunRequest(agent="bench", input=f"turns={turns} go"),
        task_queue=task_queue,
        workflow_id=wid,
    )


async def _start_hand(client: Client, task_queue: str, turns: int, wid: str | None = None) -> Any:
    from bench.handwritten import HandLoop, HandRequest

    return await client.start_workflow(
        HandLoop.run,
        HandRequest(input=f"turns={turns} go", max_turns=turns + 5),
        id=wid or f"hand-{uuid.uuid4().hex}",
        task_queue=task_queue,
    )


async def start_impl(
    impl: str, client: Client, task_queue: str, turns: int, wid: str | None = None
) -> Any:
    """Start one ``turns``-turn run of ``impl`` (``ours`` or ``baseline``, ``plugin``, ``hand``)."""
    if impl in ("ours", "baseline"):
        return await _start_ours(client, task_queue, turns, wid)
    if impl == "plugin":
        return await _start_plugin(client, task_queue, turns, wid)
    return await _start_hand(client, task_queue, turns, wid)


def _spawn_impl(
    impl: str,
    srv: DevServer,
    tq: str,
    d: Path,
    model: ScriptedModel,
    spec: Path,
    name: str,
    tuning: str = "ours",
) -> WorkerProc:
    """A worker of ``impl`` on ``srv``'s queue ``tq``: the bench spec and payload folder for ours."""
    return spawn_worker(
        impl,
        srv.address,
        tq,
        d,
        model_url=model.base_url,
        spec_file=spec if impl == "ours" else None,
        tuning=tuning,
        name=name,
        payload_dir=d / "payloads",
    )
