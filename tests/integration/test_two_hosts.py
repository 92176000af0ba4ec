"""Two workers on two "hosts" share only Temporal, PostgreSQL and S3 (issue #37, part 4).

Each worker is an ``agentctl worker`` process with an ``AGENT_HOME`` of its own (its state folder:
nothing of it is shared), the memory store on a real PostgreSQL (the ``pgserver`` wheel), the
payloads and the sandbox's files in a real S3 API (moto's server, over HTTP), and the payload
keys both hosts are given (docs/deploying.md, "Many hosts"). One run starts on host A: a sandboxed
call writes a file, ``remember`` writes a fact; host A is SIGKILLed while the run's next model
step is in flight; host B, started then, retries that step and runs the rest: a sandboxed call
reads the file A wrote, ``search_memory`` finds the fact A wrote, and the run completes. The
history names the worker of every activity, so the test checks which host did what.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from tests.support.harness import until_state
from workers import client as rc
from workers.config import PROJECT_ROOT, Settings
from workers.testing.scripted_model import Reply, ScriptedModel, text, tool_call
from workers.testing.stores import (
    S3Server,
    host_env,
    new_encryption_keys,
    start_postgres,
    start_s3,
)
from workflows.models import RunRequest

NOTE = "tide table 42"
FACT = "The user's boat is called Tidal Wave."
LEARNED = "The user sails on Sundays."  # what consolidation extracts from the finished run


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A PostgreSQL and an S3 server for the module: the stores the hosts share."""
    folder = tmp_path_factory.mktemp("shared")
    pg = start_postgres()  # in /tmp, outside pytest's folder (workers/testing/stores.py)
    s3 = start_s3(folder / "moto.log")
    try:
        yield {"pg": pg, "s3": s3}
    finally:
        s3.stop()
        pg.stop()


class Model:
    """The scripted model of the run; holds the in-flight step of the kill (first attempt)."""

    def __init__(self) -> None:
        self.at_kill_step = threading.Event()
        self.server = ScriptedModel(responder=self.reply)

    def reply(self, request: dict[str, Any]) -> Reply:
        msgs = [m for m in request.get("messages") or [] if isinstance(m, dict)]
        if msgs and "You keep long-term memory" in str(msgs[0].get("content") or ""):
            return text(json.dumps({"facts": [{"text": LEARNED, "replaces": None}]}))
        done = [str(m.get("content") or "") for m in msgs if m.get("role") == "tool"]
        if len(done) == 0:  # host A: a file in the sandbox, kept for later calls
            code = f"open('notes.txt', 'w').write({NOTE!r})"
            return tool_call("run_python", {"code": code})
        if len(done) == 1:  # host A: a fact in memory (approved by the test)
            return tool_call("remember", {"text": FACT})
        if len(done) == 2:  # in flight on host A when it is killed; host B retries it
            call = tool_call("run_python", {"code": "print(open('notes.txt').read())",
                                            "files": ["notes.txt"]})  # fmt: skip
            if not self.at_kill_step.is_set():
                self.at_kill_step.set()
                return call.with_delay(120)  # never answered: the worker dies first
            return call
        if len(done) == 3:
            return tool_call("search_memory", {"query": "boat"})
        return text("done\n" + "\n".join(done[2:]))


def _worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    agentctl = str(Path(sys.executable).with_name("agentctl"))
    with log.open("ab") as fh:
        return subprocess.Popen(
            [agentctl, "worker"], cwd=PROJECT_ROOT, env=env, stdout=fh,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


async def _activity_hosts(handle: Any) -> list[tuple[str, str]]:
    """``(activity type, identity of the worker that ran it)`` of every completed activity."""
    scheduled: dict[int, str] = {}
    started: dict[int, str] = {}
    out: list[tuple[str, str]] = []
    async for ev in handle.fetch_history_events():
        if ev.HasField("activity_task_scheduled_event_attributes"):
            scheduled[ev.event_id] = ev.activity_task_scheduled_event_attributes.activity_type.name
        elif ev.HasField("activity_task_started_event_attributes"):
            a = ev.activity_task_started_event_attributes
            started[a.scheduled_event_id] = a.identity
        elif ev.HasField("activity_task_completed_event_attributes"):
            sid = ev.activity_task_completed_event_attributes.scheduled_event_id
            out.append((scheduled[sid], started[sid]))
    return out


async def test_a_run_moves_to_another_host_with_its_memory_and_files(
    shared: dict[str, Any], dev_server_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    s3: S3Server = shared["s3"]
    bucket = s3.make_bucket()
    memory_url = shared["pg"].new_database()
    keys = new_encryption_keys()
    ws = tmp_path / "workspace"  # not used by the tools of this agent; each host may have one
    ws.mkdir()
    agent = {
        "model": "scripted",
        "system_prompt": "You are the two-host agent.",
        "tools": ["run_python", "remember", "search_memory"],
        "memory": {"read": ["user"], "write": ["user"], "consolidate_after_seconds": 1},
        "workspace": str(ws),
    }
    spec = tmp_path / "agents.yml"
    spec.write_text(json.dumps({"agents": {"default": agent}}))  # JSON is YAML
    tq = f"two-hosts-{os.getpid()}-{id(tmp_path)}"
    model = Model()
    model.server.start()
    homes = {name: tmp_path / f"host-{name}" for name in ("a", "b")}

    def env(name: str) -> dict[str, str]:
        shared_env = host_env(homes[name], memory_url=memory_url, s3=s3, bucket=bucket,
                              encryption_keys=keys)  # fmt: skip
        return {
            **os.environ,
            **shared_env,
            "TEMPORAL_ADDRESS": dev_server_address,
            "AGENT_TASK_QUEUE": tq,
            "OPENAI_BASE_URL": model.server.base_url,
            "AGENT_SPEC_FILE": str(spec),
            "AGENT_MODEL": "scripted",
            "AGENT_PAYLOAD_THRESHOLD_BYTES": "512",  # transcripts go to the bucket too
            "AGENT_HEARTBEAT_TIMEOUT": "3",
            "PYTHONPATH": str(PROJECT_ROOT),
        }

    # the test's client reads the same bucket with the same keys (the results are stored there)
    for k, v in host_env(homes["a"], memory_url=memory_url, s3=s3, bucket=bucket,
                         encryption_keys=keys).items():  # fmt: skip
        if k.startswith("AWS_"):
            monkeypatch.setenv(k, v)
    settings = Settings(
        temporal_address=dev_server_address, task_queue=tq, payload_store="s3",
        s3_bucket=bucket, s3_prefix="agent-runtime/", encryption_keys=keys,
        payload_threshold_bytes=512, state_dir=str(tmp_path / "client"),
    )  # fmt: skip
    client: Client = await rc.connect(settings)
    host_a = _worker(env("a"), tmp_path / "host-a.log")
    host_b: subprocess.Popen[bytes] | None = None
    try:
        h = await rc.start_run(client, RunRequest(input="two hosts", principal_id="ann"),
                               task_queue=tq)  # fmt: skip
        st = await until_state(h, lambda s: s.pending_approvals, timeout=90)
        assert [p.name for p in st.pending_approvals] == ["remember"]
        await rc.decide(client, h.id, st.pending_approvals[0].tool_call_id, "approve", "ann")
        await asyncio.to_thread(model.at_kill_step.wait, 90)
        assert model.at_kill_step.is_set(), "the run never reached its third model step"
        host_a.send_signal(signal.SIGKILL)  # a crash mid-step: no graceful shutdown
        await asyncio.to_thread(host_a.wait, 30)
        host_b = _worker(env("b"), tmp_path / "host-b.log")
        res = await asyncio.wait_for(h.result(), timeout=120)
        # consolidation (its own workflow) runs on host B from the transcript kept in PostgreSQL
        from activities.memory import Namespace, open_store

        store = open_store(memory_url)
        ns = Namespace(tenant_id="default", scope="user:ann")
        for _ in range(60):
            texts = [i.text for i in await asyncio.to_thread(store.list, ns)]
            if LEARNED in texts:
                break
            await asyncio.sleep(1.0)
        hosts = await _activity_hosts(h)
    finally:
        _stop(host_a)
        if host_b is not None:
            _stop(host_b)
        model.server.stop()
    assert res.status == "completed", res
    assert [(c.name, c.status) for c in res.tool_calls] == [
        ("run_python", "ok"), ("remember", "ok"), ("run_python", "ok"), ("search_memory", "ok"),
    ]  # fmt: skip
    read_back, found = (res.output or "").split("\n")[1:3]
    assert json.loads(read_back)["stdout"] == NOTE + "\n"  # host A's file, read on host B
    assert FACT in found  # host A's fact, found on host B
    assert FACT in texts and LEARNED in texts
    # who did what: the worker identities are <pid>@<host>
    a_id, b_id = f"{host_a.pid}@", f"{host_b.pid}@" if host_b else "?"
    tools = [ident for kind, ident in hosts if kind == "tool.invoke"]
    assert len(tools) == 4, hosts
    assert [t.startswith(a_id) for t in tools] == [True, True, False, False], hosts
    assert all(t.startswith(b_id) for t in tools[2:]), hosts
    # nothing went to either host's local stores: payloads and files are in the bucket
    for home in homes.values():
        assert not (home / "payloads").exists() or not any((home / "payloads").rglob("*"))
        runs = home / "sandbox" / "runs"
        assert not runs.exists() or not any(p.is_file() for p in runs.rglob("*"))
    keys_in_bucket = s3.keys(bucket, "agent-runtime/")
    assert any("/sandbox-files/sha256/" in k for k in keys_in_bucket), keys_in_bucket
    assert any(k.startswith("agent-runtime/v0/") for k in keys_in_bucket), keys_in_bucket
