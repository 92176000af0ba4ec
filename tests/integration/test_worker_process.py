"""A real worker process (``agentctl worker``) against the test dev server: its log is JSON lines.

The run triggers warnings from inside the workflow sandbox (an unparsable model output, an
ignored signal), the SDK's own log lines (a tool failing with a plain exception, retried), and
holds the model's API key in that exception: every line of the worker's log must parse as one
JSON object, and the key must appear in none of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from temporalio.client import Client

from tests.support.harness import TEST_TOOLS, write_spec
from workers import client as rc
from workers.config import PROJECT_ROOT
from workers.testing.scripted_model import ScriptedModel, garbage, text, tool_call
from workflows.models import ApproveSignal, RunRequest, RunResult

KEY = "sk-proc-" + "Q" * 36  # the worker's OPENAI_API_KEY


def worker_env(address: str, tq: str, model_url: str, spec: Path, state: Path) -> dict[str, str]:
    """Environment of an ``agentctl worker`` on the test server, holding the key ``KEY``."""
    return {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "AGENT_TASK_QUEUE": tq,
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": KEY,
        "AGENT_SPEC_FILE": str(spec),
        "AGENT_MODEL": "scripted",
        "AGENT_PAYLOAD_STORE": "none",
        "AGENT_STATE_DIR": str(state),
        "AGENT_TOOL_MODULES": "tests.support.tools",
        "PYTHONPATH": str(PROJECT_ROOT),
    }


async def test_worker_log_is_json_lines_and_holds_no_secret(
    client: Client, dev_server_address: str, tmp_path: Path
):
    ws = tmp_path / "ws"
    ws.mkdir()
    spec = write_spec(tmp_path, ws, {"default": {"tools": [*TEST_TOOLS, "leak_in_exception"]}})
    model = ScriptedModel(
        [
            # unparsable output 3 times (the activity's attempts): the workflow tells the model,
            # logging a warning from inside the sandbox
            *[garbage("this is not JSON at all")] * 3,
            tool_call("leak_in_exception", {}),  # a plain exception holding the key, retried
            text("done"),
        ]
    ).start()
    log = tmp_path / "worker.log"
    tq = f"proc-{os.getpid()}-{id(tmp_path)}"
    env = worker_env(dev_server_address, tq, model.base_url, spec, tmp_path / "state")
    agentctl = str(Path(sys.executable).with_name("agentctl"))
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            [agentctl, "worker"], cwd=PROJECT_ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT
        )
    try:
        h = await rc.start_run(client, RunRequest(input="go"), task_queue=tq)
        # an approval for a call that does not exist: ignored, with a warning in the workflow
        await rc.approve_signal(client, h.id, ApproveSignal(tool_call_id="no-such-call"))
        # a payload that does not decode: the SDK logs it with its traceback, in the sandbox
        await h.signal("approve", {"tool_call_id": {"not": "a string"}})
        res = await asyncio.wait_for(h.result(), timeout=90)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 30)
        model.stop()
    assert isinstance(res, RunResult) and res.status == "completed", res
    assert any(s.signal == "approve" for s in res.ignored_signals)
    lines = log.read_text().splitlines()
    assert lines, "the worker logged nothing"
    parsed = []
    for n, line in enumerate(lines, 1):
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise AssertionError(f"line {n} of the worker log is not JSON ({e}): {line!r}") from e
        assert isinstance(parsed[-1], dict), line
    events = [p.get("event", "") for p in parsed]
    assert any("unparsable" in e for e in events), events  # the sandbox warning, rendered
    assert any("signal ignored" in e for e in events), events
    assert any("Completing activity as failed" in e for e in events), events  # the SDK's line
    assert "worker_started" in events and "worker_stopped" in events
    text_all = log.read_text()
    assert KEY not in text_all and KEY[:20] not in text_all
    assert "[REDACTED]" in text_all
