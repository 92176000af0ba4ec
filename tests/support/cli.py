"""The command lines a user runs: ``agentctl`` and the ``temporal`` CLI, as subprocesses."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from tests.support.harness import Harness
from workers.local.dev_server import temporal_binary

ROOT = Path(__file__).resolve().parents[2]


async def agentctl(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "workers.cli", *args],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
    )


def agentctl_env(h: Harness, address: str) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": address,
        "AGENT_TASK_QUEUE": h.task_queue,
        "AGENT_STATE_DIR": str(h.workspace.parent / "state"),
    }


async def temporal_cli(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    # in a thread: the worker shares this event loop and must keep running
    return await asyncio.to_thread(
        subprocess.run,
        [str(temporal_binary()), "workflow", *args, "--address", address],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def agentctl_at(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (in a thread: the worker shares this event loop)."""
    env = {**os.environ, "TEMPORAL_ADDRESS": address, "TEMPORAL_NAMESPACE": "default"}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "workers.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=str(ROOT),
    )
