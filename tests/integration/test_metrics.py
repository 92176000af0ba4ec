"""GET /healthz and GET /metrics of a worker (AGENT_METRICS_ADDRESS): real dev server, scripted model.

One worker (``run_worker``, in this process) reports to a :class:`MetricsEndpoint` the test owns,
so ``/healthz`` is read before the worker polls, while it polls and after it stopped; a second
test runs ``agentctl worker`` as a process with ``AGENT_METRICS_ADDRESS`` set.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx2 as httpx
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from tests.support.harness import TEST_TOOLS, Harness, spawn_worker_process, until_state
from workers.metrics_server import MetricsEndpoint, SdkMetrics
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workers.worker import run_worker

AGENTS = {
    "default": {
        "tools": [*TEST_TOOLS, "run_python"],
        "pricing": {"prompt_per_mtok": 1000.0, "completion_per_mtok": 2000.0},
    }
}


def samples(body: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)], from the text parsed by prometheus_client's parser."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def value(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 when none)."""
    return sum(v for ls, v in found.get(name, []) if labels.items() <= ls.items())


async def get(url: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as http:
        return await http.get(url)


async def until(check: Any, timeout: float = 20.0) -> Any:
    """Call the async ``check()`` every 0.1 s until it returns something truthy."""
    last = None
    for _ in range(int(timeout / 0.1)):
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"not reached in {timeout} s; last: {last!r}")


async def test_a_worker_serves_health_and_metrics_of_a_run_with_tool_calls(
    client: Client, dev_server_address: str, tmp_path: Path
):
    tenant = f"acme-{uuid.uuid4().hex[:6]}"
    model = ScriptedModel(
        [
            tool_call("read_file", {"path": "README.md"}),
            tool_call("run_python", {"code": "import time\ntime.sleep(0.2)\nprint(6 * 7)"}),
            text("the answer is 42"),
        ]
    )
    endpoint = MetricsEndpoint("127.0.0.1:0", SdkMetrics.start(), run_counts_seconds=0.01)
    url = await endpoint.start()
    stop = asyncio.Event()
    task: asyncio.Task[None] | None = None
    async with Harness(client, tmp_path, model, agents=AGENTS, worker=False) as h:
        try:
            before = await get(f"{url}/healthz")
            assert before.status_code == 503, before.text
            assert before.json() == {"status": "starting"}

            worker_client = await Client.connect(
                dev_server_address,
                data_converter=client.data_converter,
                **endpoint.client_options(),
            )
            task = asyncio.create_task(
                run_worker(h.settings, worker_client, stop=stop, metrics=endpoint)
            )
            del worker_client

            async def polling() -> Any:
                r = await get(f"{url}/healthz")
                return r if r.status_code == 200 else None

            ready = await until(polling)
            assert ready.json()["status"] == "polling"
            assert h.task_queue in ready.json()["task_queues"]

            result = await h.run("What is the answer?", tenant_id=tenant)
            assert result.status == "completed", result
            assert [c.status for c in result.tool_calls] == ["ok", "ok"]

            # a second run waits for a person: the approvals gauge counts it
            model.extend([tool_call("deploy", {"target": "prod"}), text("deployed")])
            waiting = await h.start("Deploy it", tenant_id=tenant)
            await until_state(waiting, lambda s: s.status == "awaiting_approval")

            async def scraped() -> Any:
                r = await get(f"{url}/metrics")
                assert r.status_code == 200, r.text
                assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
                found = samples(r.text)
                return found if value(found, "agent_runs_awaiting_approval") >= 1 else None

            found = await until(scraped)

            # the Temporal SDK's own series, in the same answer
            q = {"task_queue": h.task_queue}
            assert value(found, "temporal_workflow_task_execution_latency_count", **q) >= 3
            assert (
                value(found, "temporal_workflow_completed_total", workflow_type="AgentRun", **q)
                >= 1
            )
            assert value(found, "temporal_activity_execution_latency_count", **q) >= 2
            assert value(found, "temporal_worker_task_slots_available", **q) > 0
            # ours: model steps, tokens and cost by tenant and model
            t = {"tenant": tenant, "model": "scripted"}
            assert value(found, "agent_model_steps_total", outcome="ok", **t) == 4
            prompt = value(found, "agent_model_tokens_total", kind="prompt", **t)
            completion = value(found, "agent_model_tokens_total", kind="completion", **t)
            assert prompt > 0 and completion > 0
            cost = value(found, "agent_model_cost_usd_total", **t)
            assert abs(cost - (prompt * 1000 + completion * 2000) / 1e6) < 1e-6
            assert value(found, "agent_model_step_seconds_count", model="scripted") >= 4
            # tool calls by tool and outcome; sandbox seconds by tenant
            assert value(found, "agent_tool_calls_total", tool="read_file", outcome="ok") >= 1
            assert value(found, "agent_tool_calls_total", tool="run_python", outcome="ok") >= 1
            sandbox = value(found, "agent_sandbox_seconds_total", tenant=tenant, tool="run_python")
            assert 0.2 <= sandbox < 30
            assert value(found, "agent_sandbox_runs_total", tool="run_python", outcome="ok") >= 1
            # runs by status, from visibility
            assert value(found, "agent_runs", execution_status="Completed") >= 1
            assert value(found, "agent_runs", execution_status="Running") >= 1
            assert value(found, "agent_runs_open", status="awaiting_approval") >= 1
            assert value(found, "agent_run_counts_updated_timestamp_seconds") > 0
            # no run id in any label
            for name, rows in found.items():
                for labels, _ in rows:
                    assert not any(str(v).startswith("run-") for v in labels.values()), name

            await waiting.terminate("test over")
            stop.set()
            await asyncio.sleep(0)
            stopping = await get(f"{url}/healthz")
            assert stopping.status_code == 503
            assert stopping.json()["status"] in ("stopping", "stopped")
            await asyncio.wait_for(task, 30)
            after = await get(f"{url}/healthz")
            assert after.status_code == 503
            assert after.json() == {"status": "stopped"}
        finally:
            stop.set()
            if task is not None:
                await asyncio.wait_for(task, 30)
            await endpoint.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_agentctl_worker_serves_them_at_agent_metrics_address(
    client: Client, dev_server_address: str, tmp_path: Path
):
    port = _free_port()
    model = ScriptedModel([tool_call("read_file", {"path": "README.md"}), text("42")])
    async with Harness(client, tmp_path, model, worker=False) as h:
        os.environ["AGENT_METRICS_ADDRESS"] = f"127.0.0.1:{port}"
        try:
            proc = spawn_worker_process(h, dev_server_address, tmp_path / "worker.log")
        finally:
            del os.environ["AGENT_METRICS_ADDRESS"]
        try:

            async def polling() -> Any:
                try:
                    r = await get(f"http://127.0.0.1:{port}/healthz")
                except httpx.TransportError:
                    return None
                return r if r.status_code == 200 else None

            await until(polling, timeout=60)
            assert (await h.run("answer", tenant_id="cli")).status == "completed"
            r = await get(f"http://127.0.0.1:{port}/metrics")
            found = samples(r.text)
            assert value(found, "temporal_workflow_completed_total", task_queue=h.task_queue) >= 1
            assert value(found, "agent_model_steps_total", tenant="cli", outcome="ok") >= 1
            assert value(found, "agent_tool_calls_total", tool="read_file") >= 1
            assert value(found, "process_cpu_seconds_total") > 0
        finally:
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 30)
        assert code == 0, (tmp_path / "worker.log").read_text()[-3000:]
        log = (tmp_path / "worker.log").read_text()
        assert '"metrics_serving"' in log
        assert all(line.startswith("{") for line in log.splitlines() if line.strip()), log[-2000:]


async def test_the_console_serves_health_and_metrics_on_its_own_address(
    client: Client, dev_server_address: str, tmp_path: Path, monkeypatch
):
    from workers.console.serve import run_server

    monkeypatch.setenv("AGENT_STATE_DIR", str(tmp_path))  # the console's token and signing key
    endpoint = MetricsEndpoint("127.0.0.1:0", SdkMetrics.start(), run_counts_seconds=0.01)
    url = await endpoint.start()
    task: asyncio.Task[None] | None = None
    try:
        assert (await get(f"{url}/healthz")).status_code == 503
        console_client = await Client.connect(
            dev_server_address, data_converter=client.data_converter, **endpoint.client_options()
        )
        task = asyncio.create_task(
            run_server(console_client, "127.0.0.1", 0, lambda r: f"http://ui/{r}", endpoint)
        )
        del console_client

        async def serving() -> Any:
            r = await get(f"{url}/healthz")
            return r if r.status_code == 200 else None

        assert (await until(serving)).json() == {"status": "serving"}
        await get(f"{url}/metrics")  # counts runs through the console's client ...
        found = samples((await get(f"{url}/metrics")).text)  # ... which the SDK's series show
        counted = value(found, "temporal_request_total", operation="CountWorkflowExecutions")
        assert counted >= 2
        assert "agent_runs" in found and "agent_runs_awaiting_approval" in found
        # no authentication on this address: the console's own token is not needed here
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        task = None
        after = await get(f"{url}/healthz")
        assert (after.status_code, after.json()) == (503, {"status": "stopped"})
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await endpoint.stop()


async def test_agentctl_serve_serves_them_apart_from_the_console(
    dev_server_address: str, tmp_path: Path
):
    metrics_port, console_port = _free_port(), _free_port()
    env = dict(
        os.environ,
        TEMPORAL_ADDRESS=dev_server_address,
        AGENT_METRICS_ADDRESS=f"127.0.0.1:{metrics_port}",
        AGENT_STATE_DIR=str(tmp_path),
    )
    argv = [sys.executable, "-m", "workers.cli", "serve", "--port", str(console_port)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:

        async def serving() -> Any:
            try:
                return (await get(f"http://127.0.0.1:{metrics_port}/healthz")).status_code == 200
            except httpx.TransportError:
                return None

        await until(serving, timeout=60)
        found = samples((await get(f"http://127.0.0.1:{metrics_port}/metrics")).text)
        assert "agent_runs" in found and "temporal_request_total" in found
        # the console's own address keeps its authentication; it has no /metrics of its own
        assert (await get(f"http://127.0.0.1:{console_port}/metrics")).status_code == 401
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = await asyncio.to_thread(proc.communicate, None, 30)
    assert b"Traceback" not in out, out.decode()[-2000:]
