"""Test harness: a real dev server, the scripted model server and a worker on its own task queue."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from activities.runtime import RuntimeActivities
from workers import callback_keys
from workers.client import start_run
from workers.config import Settings
from workers.testing.scripted_model import ScriptedModel
from workers.worker import build_workers
from workflows.models import RunRequest, RunResult, RunState

T = TypeVar("T")

TEST_TOOLS = [
    "list_files",
    "read_file",
    "search_files",
    "calculator",
    "write_file",
    "slow_echo",
    "record",
    "fail_business",
    "deploy",
    "echo_secret",
]


def write_spec(
    directory: Path,
    workspace: Path,
    agents: dict[str, dict[str, Any]] | None = None,
    top: dict[str, Any] | None = None,
) -> Path:
    """Write an agents YAML file; every agent defaults to the scripted model and the test tools.

    ``top`` adds top-level sections (e.g. ``rate_limits``).
    """
    base = {
        "model": "scripted",
        "system_prompt": "You are a test agent.",
        "tools": TEST_TOOLS,
        "workspace": str(workspace),
    }
    agents = agents or {"default": {}}
    body = {
        "tool_modules": ["tests.support.tools"],
        **(top or {}),
        "agents": {k: {**base, **v} for k, v in agents.items()},
    }
    path = directory / "agents.yml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


class Harness:
    """Starts a scripted model and a worker; ``run``/``start`` runs ``AgentRun`` against them."""

    def __init__(
        self,
        client: Client,
        tmp_path: Path,
        model: ScriptedModel,
        agents: dict[str, dict[str, Any]] | None = None,
        worker: bool = True,
        top: dict[str, Any] | None = None,
        settings: dict[str, Any] | None = None,
        live: str | None = None,
        live_secret: bytes = b"test-live-secret",
        live_advertise: str | None = None,
    ) -> None:
        self.client = client
        self.live_address = live
        """Where the worker serves its live channel (``host:port``; None: no live channel)."""
        self.live_secret = live_secret
        self.live_advertise = live_advertise
        self.live: Any = None
        """The running ``workers.live_server.LiveServer`` (its ``url``), while the worker runs."""
        self.model = model
        self.workspace = tmp_path / "ws"
        self.workspace.mkdir(exist_ok=True)
        (self.workspace / "README.md").write_text("# Demo\nline two\nthe answer is 42\n")
        self.journal = tmp_path / "journal.jsonl"
        self.spec_file = write_spec(tmp_path, self.workspace, agents, top)
        self.task_queue = f"tq-{uuid.uuid4().hex[:8]}"
        self.memory_url: str | None = None
        """The memory store (default: a SQLite file beside the workspace)."""
        self._with_worker = worker
        self._settings = settings or {}
        """More worker settings (``Settings`` fields), e.g. ``model_idle_timeout_seconds``."""
        self._worker: Worker | None = None
        self._model_workers: list[Worker] = []
        self._task: asyncio.Task[None] | None = None
        self._model_tasks: list[asyncio.Task[None]] = []
        self._runtime: RuntimeActivities | None = None

    @property
    def settings(self) -> Settings:
        return Settings(
            openai_base_url=self.model.base_url,
            openai_api_key="test-key",
            spec_file=str(self.spec_file),
            task_queue=self.task_queue,
            tool_modules=["tests.support.tools"],
            default_model="scripted",
            memory_url=self.memory_url or f"sqlite://{self.workspace.parent / 'memory.db'}",
            workflow_sandbox=True,  # tests catch non-deterministic workflow code
            **self._settings,
        )

    async def __aenter__(self) -> Harness:
        self.model.start()
        if self._with_worker:
            await self.start_worker()
        return self

    async def start_worker(self) -> None:
        self._runtime = RuntimeActivities(
            self.settings.spec_file,
            self.settings.default_model,
            callbacks=callback_keys.signer(self.settings),
        )
        live_url = None
        if self.live_address is not None:
            from workers.live_server import LiveServer

            self.live = LiveServer(self.live_address, self.live_secret, self.live_advertise)
            live_url = await self.live.start()
        self._worker, *self._model_workers = build_workers(
            self.client, self.settings, runtime=self._runtime, live_url=live_url
        )
        self._task = asyncio.ensure_future(self._worker.run())
        self._model_tasks = [asyncio.ensure_future(w.run()) for w in self._model_workers]
        await asyncio.sleep(0)

    async def stop_worker(self) -> None:
        for w, t in zip(self._model_workers, self._model_tasks, strict=True):
            await w.shutdown()
            await t
        self._model_workers, self._model_tasks = [], []
        if self._worker is not None:
            await self._worker.shutdown()
            if self._task is not None:
                await self._task
            self._worker = None
            self._task = None
        if self._runtime is not None:
            await self._runtime.aclose()  # stops the MCP stdio servers the worker started
            self._runtime = None
        if self.live is not None:
            await self.live.stop()
            self.live = None

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_worker()
        self.model.stop()

    async def start(self, input: str, **kw: Any) -> WorkflowHandle[Any, RunResult]:
        return await start_run(
            self.client, RunRequest(input=input, **kw), task_queue=self.task_queue
        )

    async def start_held(self, input: str, **kw: Any) -> tuple[WorkflowHandle[Any, RunResult], str]:
        """Start a run (as :meth:`start`) and wait until a call of it is held for approval.

        Returns:
            The run's handle and the id of the first held call.

        Raises:
            AssertionError: no call was held within 20 s (:func:`until_state`).
        """
        handle = await self.start(input, **kw)
        st = await until_state(handle, lambda s: bool(s.pending_approvals))
        return handle, st.pending_approvals[0].tool_call_id

    async def run(self, input: str, **kw: Any) -> RunResult:
        h = await self.start(input, **kw)
        return await asyncio.wait_for(h.result(), timeout=60)


ROOT = Path(__file__).resolve().parents[2]


def spawn_worker_process(
    h: Harness, address: str, log: Path, argv: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """A worker in its own process group (so a test can SIGKILL it), configured for ``h``.

    ``argv`` defaults to ``python -m workers.cli worker``; its output is appended to ``log``.
    """
    env = dict(os.environ)
    env.update(
        TEMPORAL_ADDRESS=address,
        TEMPORAL_NAMESPACE="default",
        AGENT_TASK_QUEUE=h.task_queue,
        OPENAI_BASE_URL=h.model.base_url,
        OPENAI_API_KEY="test-key",
        AGENT_SPEC_FILE=str(h.spec_file),
        AGENT_TOOL_MODULES="tests.support.tools",
        AGENT_MODEL="scripted",
        PYTHONPATH=str(ROOT),
    )
    return subprocess.Popen(
        argv or [sys.executable, "-m", "workers.cli", "worker"],
        cwd=ROOT,
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


async def until_state(handle: Any, pred: Any, timeout: float = 20.0) -> RunState:
    """Query ``state`` every 50 ms until ``pred(state)``; raises AssertionError after ``timeout``.

    The state is decoded here from the plain JSON (a bare client's converter may not know
    ``RunState``); a query before the run's first workflow task is retried.
    """
    st = None
    for _ in range(int(timeout / 0.05)):
        try:
            st = RunState.model_validate(await handle.query("state"))
            if pred(st):
                return st
        except Exception:  # noqa: BLE001 - query before the first workflow task
            pass
        await asyncio.sleep(0.05)
    raise AssertionError(f"state not reached; last: {st}")


async def through_a_worker_crash(
    h: Harness,
    address: str,
    log: Path,
    start: Callable[[], Awaitable[Any]],
    crash_when: Callable[[], bool],
    finish: Callable[[Any], Awaitable[T]],
    crash_timeout: float = 30.0,
) -> T:
    """Run with a worker process that is SIGKILLed, then replaced by a second one.

    ``start()`` starts the run (its result is passed to ``finish``); once ``crash_when()`` is
    true (polled every 50 ms, at most ``crash_timeout`` s) the first worker's process group is
    SIGKILLed (no graceful shutdown) and a second worker started; ``finish(handle)`` waits for what
    the test needs. The second worker then gets SIGTERM and must exit 0 (a graceful shutdown);
    the first is killed if still alive.
    """
    w1 = spawn_worker_process(h, address, log)
    try:
        handle = await start()
        for _ in range(int(crash_timeout / 0.05)):
            if crash_when():
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the moment to crash the worker never came")
        os.killpg(w1.pid, signal.SIGKILL)
        w1.wait()
        w2 = spawn_worker_process(h, address, log)
        try:
            result = await finish(handle)
        finally:
            w2.send_signal(signal.SIGTERM)
            w2.wait(timeout=30)
        assert w2.returncode == 0, f"the second worker exited {w2.returncode} on SIGTERM"
        return result
    finally:
        if w1.poll() is None:
            w1.kill()


# Debian's Chromium, started the way this machine's closed network needs (the run console's tests)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


async def until_true(cond, timeout: float = 30.0) -> None:
    """Check ``cond()`` every 50 ms until it is true; raises AssertionError after ``timeout``."""
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")
