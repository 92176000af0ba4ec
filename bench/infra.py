"""Shared machinery of the benchmarks: dev server, scripted model, worker subprocesses, runs.

Every scenario starts its own in-memory dev server (``workers.local.dev_server.start_dev_server``:
the pip-installed ``temporal server start-dev`` with the search attributes and dynamic config of
``temporal-dev.yml``), its own :class:`~workers.testing.scripted_model.ScriptedModel` and its own
worker subprocess(es) (``python -m bench.worker_proc``), and stops all of them when it ends.
The machine and its CPU accounting are in :mod:`bench.machine`, what is read back from histories
in :mod:`bench.events`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client

from workers.testing.scripted_model import Reply, ScriptedModel, text, tool_call

ROOT = Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------------------------ numbers


def percentile(values: Sequence[float], p: float) -> float | None:
    """Linear-interpolated percentile (``p`` in 0..100); None for no values."""
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def dist(values: Sequence[float], scale: float = 1.0, digits: int = 1) -> dict[str, Any]:
    """``{n, mean, p50, p95, max}`` of ``values`` multiplied by ``scale`` and rounded."""
    xs = [v * scale for v in values if v is not None]
    if not xs:
        return {"n": 0, "mean": None, "p50": None, "p95": None, "max": None}
    r = lambda v: None if v is None else round(v, digits)  # noqa: E731
    return {
        "n": len(xs),
        "mean": r(sum(xs) / len(xs)),
        "p50": r(percentile(xs, 50)),
        "p95": r(percentile(xs, 95)),
        "max": r(max(xs)),
    }


# ------------------------------------------------------------------------------------ converter


def converter_choice(settings: Any) -> tuple[Any, str]:
    """The client's data converter: ``workers.payloads.converter.build_data_converter`` if any.

    Returns ``(converter, description)``. Without that module (external payload storage not yet
    shipped) the plain pydantic converter, as ``workers.client.connect`` uses.
    """
    from temporalio.contrib.pydantic import pydantic_data_converter

    try:
        from workers.payloads import converter as conv
    except ImportError:
        return (
            pydantic_data_converter,
            "pydantic_data_converter (workers/payloads/converter.py absent)",
        )
    try:
        return conv.build_data_converter(
            settings
        ), "workers.payloads.converter.build_data_converter(settings)"
    except Exception as e:  # noqa: BLE001 - report, fall back
        return (
            pydantic_data_converter,
            f"pydantic_data_converter (build_data_converter failed: {e})",
        )


# ------------------------------------------------------------------------------------ dev server


@dataclass
class DevServer:
    """A started dev server; ``address`` for subprocesses, ``client`` for the bench."""

    proc: subprocess.Popen[bytes]
    address: str
    pid: int
    client: Client
    log: Path


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def dev_server(
    directory: Path, data_converter: Any = None, dynamic_config: dict[str, Any] | None = None
) -> AsyncIterator[DevServer]:
    """Start ``temporal server start-dev`` for one scenario and stop it at the end.

    The config is the repository's ``temporal-dev.yml`` (search attributes, dynamic config) with
    free ports, an in-memory store and no Web UI; the server's output goes to a log file.
    ``dynamic_config`` adds or overrides dynamic config values (for a comparison only).
    """
    from temporalio.contrib.pydantic import pydantic_data_converter

    from workers.local.dev_server import (
        find_dev_config,
        load_dev_config,
        start_dev_server,
        stop_dev_server,
    )

    src = find_dev_config()
    base = load_dev_config(src) if src else None
    cfg: dict[str, Any] = base.model_dump(mode="json") if base else {}
    cfg.update(
        ip="127.0.0.1", port=_free_port(), ui_port=_free_port(), db_filename=None, headless=True,
        log_level="warn", ui_codec_endpoint=None,
    )  # fmt: skip
    if dynamic_config:
        cfg["dynamic_config"] = {**(cfg.get("dynamic_config") or {}), **dynamic_config}
    cfg_path = directory / "temporal-dev.yml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    log = directory / "temporal-dev.log"
    proc = await asyncio.to_thread(start_dev_server, cfg_path, log, None, True, 60.0)
    assert proc is not None, "a server already answered on a fresh port"
    address = f"127.0.0.1:{cfg['port']}"
    client: Client | None = None
    try:
        client = await Client.connect(
            address, namespace=cfg.get("namespace", "default"),
            data_converter=data_converter or pydantic_data_converter,
        )  # fmt: skip
        yield DevServer(proc=proc, address=address, pid=proc.pid, client=client, log=log)
    finally:
        client = None
        gc.collect()
        await asyncio.to_thread(stop_dev_server, proc, 10.0)


async def connect_with(address: str, **kw: Any) -> Client:
    """A second client to the same server (e.g. with the OpenAI Agents plugin)."""
    return await Client.connect(address, namespace="default", **kw)


# ------------------------------------------------------------------------------------ model


_TURNS = re.compile(r"turns=(\d+)")
_INT = re.compile(r"-?\d+")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return ""


def counting_responder(default_turns: int = 5) -> Any:
    """Stateless responder: ``turns=N`` in the first user message; N-1 tool turns, then text.

    Each tool turn calls ``calculator`` with ``"{k}+1"`` where ``k`` is the previous result (so
    every call has different arguments and loop detection never fires), and the last model step
    answers with text. The turn number is read back from the last tool result, so it works after
    context compaction too (the first user message is always kept).
    """

    def respond(request: dict[str, Any]) -> Reply:
        msgs = request.get("messages") or []
        first_user = next(
            (m for m in msgs if isinstance(m, dict) and m.get("role") == "user"), None
        )
        m = _TURNS.search(_text_of(first_user.get("content"))) if first_user else None
        n = int(m.group(1)) if m else default_turns
        k = 0
        last = msgs[-1] if msgs else {}
        if isinstance(last, dict) and last.get("role") == "tool":
            found = _INT.search(_text_of(last.get("content")))
            k = int(found.group()) if found else sum(1 for x in msgs if x.get("role") == "tool")
        if k + 1 >= n:
            return text(f"done after {k} tool calls")
        return tool_call("calculator", {"expression": f"{k}+1"})

    return respond


def max_in_flight(model: ScriptedModel) -> int:
    """Largest number of requests the scripted model held at once."""
    evs: list[tuple[float, int]] = []
    for r in model.requests:
        evs.append((r.received_at, 1))
        evs.append((r.replied_at if r.replied_at is not None else float("inf"), -1))
    evs.sort()
    cur = best = 0
    for _, d in evs:
        cur += d
        best = max(best, cur)
    return best


# ------------------------------------------------------------------------------------ spec


def write_bench_spec(directory: Path, agents: dict[str, dict[str, Any]]) -> Path:
    """An agents YAML file for the benchmark: scripted model, the calculator tool only."""
    ws = directory / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    base = {
        "model": "scripted",
        "system_prompt": "You are a benchmark agent. Use the calculator.",
        "tools": ["calculator"],
        "workspace": str(ws),
    }
    body = {"agents": {k: {**base, **v} for k, v in agents.items()}}
    path = directory / "agents.yml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------ workers


@dataclass
class WorkerProc:
    """A worker subprocess (``python -m bench.worker_proc``) in its own process group."""

    proc: subprocess.Popen[bytes]
    log: Path
    started_wall: float
    started_mono: float
    ready_mono: float | None = None
    ready_file: Path | None = None
    tail: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        """The worker's pid (also its process group)."""
        return self.proc.pid

    def log_tail(self, n: int = 30) -> str:
        """The last ``n`` lines of the worker's log."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    async def wait_ready(self, timeout: float = 60.0) -> float:
        """Seconds from spawn until the worker polls; raises with the log tail if it died."""
        assert self.ready_file is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_file.exists():
                self.ready_mono = time.monotonic()
                return self.ready_mono - self.started_mono
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log_tail()}")
            await asyncio.sleep(0.02)
        raise RuntimeError(f"worker not ready after {timeout} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the worker's process group (a crash: no graceful shutdown)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (graceful shutdown), SIGKILL after ``timeout``; returns the exit status."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode


def spawn_worker(
    kind: str,
    address: str,
    task_queue: str,
    workdir: Path,
    *,
    model_url: str,
    spec_file: Path | None = None,
    tuning: str = "ours",
    log_level: str = "info",
    name: str = "worker",
    payload_dir: Path | None = None,
    payload_store: str | None = None,
    root: Path = ROOT,
    env: dict[str, str] | None = None,
) -> WorkerProc:
    """Start ``python -m bench.worker_proc`` (kind ``ours``, ``plugin``, ``bare`` or ``hand``).

    ``root`` is the checkout whose code the worker runs (another one for a before/after
    comparison, ``bench.cpu``); ``env`` adds environment variables (e.g. ``AGENT_ENCRYPTION_KEYS``,
    ``bench.encryption``).
    """
    ready = workdir / f"{name}-{uuid.uuid4().hex[:6]}.ready"
    log = workdir / f"{name}.log"
    args = [
        sys.executable, "-m", "bench.worker_proc",
        "--kind", kind, "--address", address, "--task-queue", task_queue,
        "--model-url", model_url, "--tuning", tuning, "--ready-file", str(ready),
        "--log-level", log_level,
    ]  # fmt: skip
    if spec_file is not None:
        args += ["--spec-file", str(spec_file)]
    if payload_dir is not None:
        args += ["--payload-dir", str(payload_dir)]
    if payload_store is not None:
        args += ["--payload-store", payload_store]
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = str(root) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    wall, mono = time.time(), time.monotonic()
    proc = subprocess.Popen(
        args,
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return WorkerProc(proc=proc, log=log, started_wall=wall, started_mono=mono, ready_file=ready)


@contextlib.contextmanager
def workdir(prefix: str) -> Any:
    """A temporary folder for one scenario (spec file, worker logs)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{prefix}-") as d:
        yield Path(d)


# ------------------------------------------------------------------------------------ runs


async def wait_all_closed(
    client: Client, task_queue: str, expected: int, timeout: float
) -> tuple[bool, float]:
    """Poll visibility until no run on ``task_queue`` is running; returns (done, seconds)."""
    t0 = time.monotonic()
    q_running = f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'"
    q_all = f"TaskQueue = '{task_queue}'"
    while time.monotonic() - t0 < timeout:
        try:
            running = (await client.count_workflows(q_running)).count
            total = (await client.count_workflows(q_all)).count
        except Exception:  # noqa: BLE001 - visibility hiccup: try again
            running, total = 1, 0
        if running == 0 and total >= expected:
            return True, time.monotonic() - t0
        await asyncio.sleep(0.5)
    return False, time.monotonic() - t0


async def list_closed(client: Client, task_queue: str) -> list[Any]:
    """Executions on ``task_queue`` (visibility)."""
    out = []
    async for wf in client.list_workflows(f"TaskQueue = '{task_queue}'", page_size=1000):
        out.append(wf)
    return out


def release_client() -> None:
    """Collect garbage so no Client outlives the event loop (crash at exit, notes/temporal.md)."""
    gc.collect()


def jsonable(value: Any) -> Any:
    """Drop non-JSON values (protobuf events) from a result tree."""
    return json.loads(json.dumps(value, default=lambda o: None))
