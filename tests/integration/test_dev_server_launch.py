"""Start real Temporal servers from the pip-installed binaries and check what they serve.

Every server started here is stopped in a `finally`, even when a test fails.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from temporalio.api.enums.v1 import IndexedValueType, WorkflowExecutionStatus
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import PydanticPayloadConverter

from workers.local.dev_server import (
    DevServerError,
    load_dev_config,
    probe_server,
    run_dev_server,
    start_dev_server,
    stop_dev_server,
)
from workers.testing.env import start_local_env, start_time_skipping_env

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "temporal-dev.yml"

EXPECTED_TYPES = {
    "AgentName": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "TenantId": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "PrincipalId": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "AgentStatus": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "TotalTokens": IndexedValueType.INDEXED_VALUE_TYPE_INT,
    "CostUsd": IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
    "SpecHash": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
    "ForkParentRunId": IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


def write_config(tmp_path: Path, **overrides: object) -> Path:
    """The shipped temporal-dev.yml with free ports and a db file under tmp_path."""
    data = yaml.safe_load(SHIPPED.read_text())
    data.update(port=free_port(), ui_port=free_port(), db_filename="state/temporal.db")
    data.update(overrides)
    path = tmp_path / "temporal-dev.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def servers() -> Iterator[list]:
    """Collects started server processes; stops all of them afterwards, whatever happened."""
    started: list = []
    try:
        yield started
    finally:
        for proc in started:
            if proc is not None:
                stop_dev_server(proc)


async def registered_attrs(client: Client, namespace: str = "default") -> dict:
    resp = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    return dict(resp.custom_attributes)


async def test_start_restart_and_persist(tmp_path: Path, servers: list) -> None:
    cfg_path = write_config(tmp_path)
    cfg = load_dev_config(cfg_path)
    log, pid_file = tmp_path / "logs" / "dev.log", tmp_path / "dev.pid"

    t0 = time.monotonic()
    proc = await asyncio.to_thread(start_dev_server, cfg_path, log, pid_file)
    first_start = time.monotonic() - t0
    servers.append(proc)
    assert proc is not None and proc.poll() is None
    assert int(pid_file.read_text()) == proc.pid
    db = tmp_path / "state" / "temporal.db"
    assert db.is_file()  # relative to the config's folder
    # the runs' histories and the server's log are the owner's only (umask 077, then 0600)
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(log.stat().st_mode) == 0o600

    client = await Client.connect(cfg.address, namespace=cfg.namespace)
    info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
    assert info.server_version
    attrs = await registered_attrs(client)
    for name, kind in EXPECTED_TYPES.items():
        assert attrs.get(name) == kind, name
    ui_url = cfg.ui_url
    assert ui_url is not None
    assert await asyncio.to_thread(
        lambda: urllib.request.urlopen(ui_url, timeout=5).status
    ) == 200  # fmt: skip

    # A run with typed search attributes; no worker needed, it just stays RUNNING.
    agent_name = SearchAttributeKey.for_keyword("AgentName")
    cost = SearchAttributeKey.for_float("CostUsd")
    await client.start_workflow(
        "AgentRun",
        id="persist-check",
        task_queue="nobody-polls-this",
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(agent_name, "default"), SearchAttributePair(cost, 0.25)]
        ),
    )
    client = None

    # A second start finds the running server and starts nothing.
    assert await asyncio.to_thread(start_dev_server, cfg_path, tmp_path / "other.log") is None

    assert await asyncio.to_thread(stop_dev_server, pid_file) is True
    assert proc.poll() is not None and not pid_file.exists()
    assert not port_open(cfg.port)

    # Restart on the same SQLite file: the run is still there.
    t0 = time.monotonic()
    proc2 = await asyncio.to_thread(start_dev_server, cfg_path, log, pid_file)
    restart = time.monotonic() - t0
    servers.append(proc2)
    assert proc2 is not None
    client = await Client.connect(cfg.address, namespace=cfg.namespace)
    handle = client.get_workflow_handle("persist-check")
    desc = await handle.describe()
    assert desc.status == WorkflowExecutionStatus.WORKFLOW_EXECUTION_STATUS_RUNNING
    assert desc.typed_search_attributes.get(agent_name) == "default"
    assert desc.typed_search_attributes.get(cost) == 0.25
    await handle.terminate("test done")
    client = None
    print(f"\ndev server ready: first start {first_start:.2f} s, restart {restart:.2f} s")

    assert await asyncio.to_thread(stop_dev_server, proc2) is True
    assert probe_server(cfg.address, timeout=1.0) is None


async def test_start_fails_with_log_tail(tmp_path: Path, servers: list) -> None:
    with socket.socket() as blocker:  # the UI port is taken: the server exits at once
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        cfg_path = write_config(tmp_path, ui_port=blocker.getsockname()[1])
        with pytest.raises(DevServerError, match=r"(?s)exited with status \d+.*address already"):
            servers.append(
                await asyncio.to_thread(start_dev_server, cfg_path, tmp_path / "dev.log")
            )


async def test_start_local_env_has_search_attributes() -> None:
    t0 = time.monotonic()
    env = await start_local_env()
    started = time.monotonic() - t0
    try:
        client = env.client
        info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        assert info.server_version
        attrs = await registered_attrs(client, client.namespace)
        for name, kind in EXPECTED_TYPES.items():
            assert attrs.get(name) == kind, name
        assert issubclass(client.data_converter.payload_converter_class, PydanticPayloadConverter)
        client = None
    finally:
        await env.shutdown()
    print(f"\nstart_local_env: {started:.2f} s")


async def test_start_time_skipping_env() -> None:
    t0 = time.monotonic()
    env = await start_time_skipping_env()
    started = time.monotonic() - t0
    try:
        assert env.supports_time_skipping
        before = await env.get_current_time()
        await env.sleep(3600)  # skipped, not waited
        assert (await env.get_current_time() - before).total_seconds() >= 3600
    finally:
        await env.shutdown()
    print(f"\nstart_time_skipping_env: {started:.2f} s")


async def test_run_dev_server_background(tmp_path: Path, servers: list) -> None:
    cfg_path = write_config(tmp_path, headless=True)
    cfg = load_dev_config(cfg_path)
    out = io.StringIO()
    pid_file = tmp_path / ".agent-runtime" / "temporal-dev.pid"
    try:
        assert await asyncio.to_thread(run_dev_server, cfg_path, False, out) == 0
        servers.append(int(pid_file.read_text()))
        assert "ready" in out.getvalue() and cfg.address in out.getvalue()
        assert (tmp_path / ".agent-runtime" / "temporal-dev.log").is_file()
        # Already running: says so, starts nothing.
        again = io.StringIO()
        assert await asyncio.to_thread(run_dev_server, cfg_path, True, again) == 0
        assert "already answers" in again.getvalue()
    finally:
        await asyncio.to_thread(stop_dev_server, pid_file)
    assert not pid_file.exists() and not port_open(cfg.port)


def test_run_dev_server_foreground_ctrl_c(tmp_path: Path) -> None:
    """Foreground mode in a child process: ready banner, then Ctrl-C stops it with status 0."""
    cfg_path = write_config(tmp_path, headless=True)
    cfg = load_dev_config(cfg_path)
    code = "import sys; from workers.local.dev_server import run_dev_server; "
    code += f"sys.exit(run_dev_server({str(cfg_path)!r}))"
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )
    try:
        lines = []
        assert child.stderr is not None
        for line in child.stderr:
            lines.append(line)
            if "Press Ctrl-C" in line:
                break
        assert any("ready" in line for line in lines), lines
        assert probe_server(cfg.address, timeout=2.0) is not None
        os.killpg(child.pid, signal.SIGINT)  # what Ctrl-C does: the whole group gets SIGINT
        assert child.wait(20) == 0
        assert not port_open(cfg.port)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(5)


async def test_make_stop_stops_the_dev_server_started_in_the_state_dir(
    tmp_path: Path, servers: list, monkeypatch
) -> None:
    """`make demo` records the dev server under AGENT_STATE_DIR; `make stop` finds it there."""
    from workers.local import procs

    (tmp_path / "project").mkdir()
    cfg_path = write_config(tmp_path / "project", headless=True)
    cfg = load_dev_config(cfg_path)
    state = tmp_path / "elsewhere" / "state"
    monkeypatch.setenv("AGENT_STATE_DIR", str(state))
    out = io.StringIO()
    assert await asyncio.to_thread(run_dev_server, cfg_path, False, out, 30.0, state) == 0
    pid_file = state / "temporal-dev.pid"
    servers.append(int(pid_file.read_text()))
    assert not (tmp_path / "project" / ".agent-runtime" / "temporal-dev.pid").exists()
    await asyncio.to_thread(procs.stop_all)
    assert not pid_file.exists() and not port_open(cfg.port)
