"""The machine a benchmark runs on, and the CPU its processes use (Linux ``/proc``).

:func:`machine_info` is what every report starts with (cores, memory, CPU model, load, versions,
date); :class:`CpuMeter` takes the CPU seconds of the dev server and worker processes over a
measurement, with the whole machine's busy share beside them (the benchmark shares its 2 cores).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


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
