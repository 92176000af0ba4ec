"""Shared machinery of the benchmarks: dev server, scripted model, worker subprocesses, histories.

Every scenario starts its own in-memory dev server (``workers.local.dev_server.start_dev_server``:
the pip-installed ``temporal server start-dev`` with the search attributes and dynamic config of
``temporal-dev.yml``), its own :class:`~workers.testing.scripted_model.ScriptedModel` and its own
worker subprocess(es) (``python -m bench.worker_proc``), and stops all of them when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from workers.testing.scripted_model import Reply, ScriptedModel, text, tool_call

ROOT = Path(__file__).resolve().parent.parent
CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

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


# ------------------------------------------------------------------------------------ machine


def machine_info() -> dict[str, Any]:
    """nproc, memory, CPU model, load, Python and package versions, date."""
    from importlib.metadata import PackageNotFoundError, version

    def ver(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    mem_gib = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    cpu = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    temporal_cli = None
    with contextlib.suppress(Exception):
        from workers.local.dev_server import temporal_binary

        out = subprocess.run(
            [str(temporal_binary()), "--version"], capture_output=True, text=True, timeout=10
        )
        temporal_cli = out.stdout.strip()
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": mem_gib,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "temporalio": ver("temporalio"),
        "temporal_cli": temporal_cli,
        "openai": ver("openai"),
        "temporalio_openai_agents": ver("temporalio-openai-agents"),
        "openai_agents": ver("openai-agents"),
        "pydantic": ver("pydantic"),
    }


def proc_cpu_seconds(pid: int) -> float | None:
    """user+system CPU seconds of a process (Linux /proc), None if unreadable."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def child_pids_matching(word: str) -> list[int]:
    """Pids of this process's children whose command line contains ``word``."""
    me = os.getpid()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            if ppid != me:
                continue
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        if word in cmd:
            out.append(int(d.name))
    return out


def machine_cpu_seconds() -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the whole machine since boot, from /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    vals = [int(x) for x in first[1:9]]
    total = sum(vals)
    idle = vals[3] + vals[4]
    return (total - idle) / CLK_TCK, total / CLK_TCK


class CpuMeter:
    """CPU seconds used by a set of processes between :meth:`start` and :meth:`stop`.

    Also the whole machine's busy share and what other processes (other engineers' tests, a
    model server...) used meanwhile: the benchmark shares 2 cores with them.
    """

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {k: v for k, v in pids.items() if v}
        self._t0 = 0.0
        self._c0: dict[str, float | None] = {}

    def start(self) -> None:
        """Take the starting readings."""
        self._t0 = time.monotonic()
        self._c0 = {k: proc_cpu_seconds(p) for k, p in self.pids.items()}
        self._self0 = time.process_time()
        self._m0 = machine_cpu_seconds()

    def stop(self) -> dict[str, Any]:
        """CPU seconds and percentages of one core per process since :meth:`start`."""
        wall = time.monotonic() - self._t0
        out: dict[str, Any] = {"wall_s": round(wall, 2)}
        for k, p in self.pids.items():
            c1 = proc_cpu_seconds(p)
            c0 = self._c0.get(k)
            if c0 is not None and c1 is not None:
                out[f"{k}_cpu_s"] = round(c1 - c0, 2)
                out[f"{k}_cpu_pct"] = round(100 * (c1 - c0) / wall, 1) if wall > 0 else None
        bench = time.process_time() - self._self0
        out["bench_process_cpu_s"] = round(bench, 2)
        out["bench_process_cpu_pct"] = round(100 * bench / wall, 1) if wall > 0 else None
        m1 = machine_cpu_seconds()
        if self._m0 and m1 and wall > 0:
            busy = m1[0] - self._m0[0]
            total = m1[1] - self._m0[1]
            ours = bench + sum(out.get(f"{k}_cpu_s", 0) for k in self.pids)
            out["machine_busy_pct"] = round(100 * busy / total, 1) if total > 0 else None
            out["other_processes_cpu_pct"] = round(100 * max(0.0, busy - ours) / wall, 1)
        out["loadavg_1m_end"] = round(os.getloadavg()[0], 2)
        return out


# ------------------------------------------------------------------------------------ converter


def converter_choice(settings: Any) -> tuple[Any, str]:
    """The client's data converter: ``workers.payloads.converter.build_data_converter`` if any.

    Returns ``(converter, description)``. Without that module (external payload storage not yet
    shipped) the plain pydantic converter, as ``workers.client.connect`` uses.
    """
    from temporalio.contrib.pydantic import pydantic_data_converter

    try:
        from workers.payloads import converter as conv  # type: ignore[attr-defined]
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


# ------------------------------------------------------------------------------------ histories


def ts(event: Any) -> float:
    """Event time in seconds since the epoch."""
    return event.event_time.seconds + event.event_time.nanos / 1e9


def _payload_sizes(event: Any) -> list[int]:
    sizes: list[int] = []
    for attr in (
        "workflow_execution_started_event_attributes",
        "activity_task_scheduled_event_attributes",
        "activity_task_completed_event_attributes",
        "workflow_execution_completed_event_attributes",
        "workflow_execution_continued_as_new_event_attributes",
        "marker_recorded_event_attributes",
    ):
        if not event.HasField(attr):
            continue
        a = getattr(event, attr)
        for fld in ("input", "result"):
            if hasattr(a, fld) and a.HasField(fld):
                sizes += [p.ByteSize() for p in getattr(a, fld).payloads]
    return sizes


async def fetch_chain(
    client: Client, workflow_id: str, first_run_id: str | None
) -> list[dict[str, Any]]:
    """Every run of a continue-as-new chain, first first: run id, events, size, biggest payload."""
    out = []
    run_id = first_run_id
    seen = 0
    while run_id and seen < 1000:
        seen += 1
        h = client.get_workflow_handle(workflow_id, run_id=run_id)
        hist = await h.fetch_history()
        desc = await h.describe()
        info = desc.raw_description.workflow_execution_info
        events = list(hist.events)
        payloads = [s for e in events for s in _payload_sizes(e)]
        nxt = None
        last = events[-1] if events else None
        if last is not None and last.HasField(
            "workflow_execution_continued_as_new_event_attributes"
        ):
            nxt = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
        out.append(
            {
                "run_id": run_id,
                "events": events,
                "event_count": len(events),
                "history_size_bytes": int(info.history_size_bytes)
                or sum(e.ByteSize() for e in events),
                "max_payload_bytes": max(payloads) if payloads else 0,
                "payload_bytes_total": sum(payloads),
                "status": desc.status.name if desc.status else None,
                "last_event": EventType.Name(last.event_type) if last is not None else None,
            }
        )
        run_id = nxt
    return out


def activity_types(events: Iterable[Any]) -> dict[int, str]:
    """Scheduled event id -> activity type name."""
    return {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }


def model_scheduled_times(events: Sequence[Any], model_type: str) -> list[float]:
    """Times at which the model activity was scheduled (one per turn)."""
    return [
        ts(e)
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == model_type
    ]


def phase_breakdown(events: Sequence[Any]) -> dict[str, list[float]]:
    """Seconds per phase over a history: activity dispatch/execution per type, workflow tasks.

    * ``<type>.dispatch``: activity scheduled -> started (server matching + worker poll).
    * ``<type>.exec``: started -> completed (the activity's own code, as the server sees it).
    * ``wft.dispatch``: workflow task scheduled -> started.
    * ``wft.process``: workflow task started -> completed (the worker running workflow code,
      converting payloads, and the RPC).
    * ``wft.after_activity``: activity completed -> next workflow task started (the hop a
      result takes back into the workflow).
    """
    types = activity_types(events)
    sched_t: dict[int, float] = {}
    started_t: dict[int, float] = {}
    wft_sched: dict[int, float] = {}
    wft_start: dict[int, float] = {}
    phases: dict[str, list[float]] = {}
    last_activity_done: float | None = None

    def add(k: str, v: float) -> None:
        phases.setdefault(k, []).append(v)

    for e in events:
        t = ts(e)
        et = e.event_type
        if et == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            sched_t[e.event_id] = t
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            sid = e.activity_task_started_event_attributes.scheduled_event_id
            started_t[sid] = t
            if sid in sched_t:
                add(f"{types.get(sid, '?')}.dispatch", t - sched_t[sid])
        elif et == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            sid = e.activity_task_completed_event_attributes.scheduled_event_id
            if sid in started_t:
                add(f"{types.get(sid, '?')}.exec", t - started_t[sid])
            last_activity_done = t
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            wft_sched[e.event_id] = t
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            sid = e.workflow_task_started_event_attributes.scheduled_event_id
            wft_start[e.event_id] = t
            if sid in wft_sched:
                add("wft.dispatch", t - wft_sched[sid])
            if last_activity_done is not None:
                add("wft.after_activity", t - last_activity_done)
                last_activity_done = None
        elif et == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            st = e.workflow_task_completed_event_attributes.started_event_id
            if st in wft_start:
                add("wft.process", t - wft_start[st])
    return phases


def count_activities(events: Iterable[Any]) -> dict[str, int]:
    """How many activities of each type were scheduled."""
    out: dict[str, int] = {}
    for name in activity_types(events).values():
        out[name] = out.get(name, 0) + 1
    return out


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
