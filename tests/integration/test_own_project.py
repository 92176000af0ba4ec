"""A project of one's own (`agentctl init`), served by `agentctl worker` started in its folder: the
project's agent runs with the project's tool, against the test dev server and a scripted model
(issue #37)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from workers.config import PROJECT_ROOT
from workers.testing.scripted_model import ScriptedModel, text, tool_call


def project_env(address: str, tq: str, model_url: str, state: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": address,
        "AGENT_TASK_QUEUE": tq,
        "OPENAI_BASE_URL": model_url,
        "AGENT_MODEL": "scripted",
        "AGENT_PAYLOAD_STORE": "none",
        "AGENT_STATE_DIR": str(state),
        "AGENT_EVAL_WORKER": "false",
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    for name in ("AGENT_SPEC_FILE", "AGENT_TOOL_MODULES"):  # the project's agents.yml decides
        env.pop(name, None)
    return env


async def test_a_worker_started_in_an_init_project_runs_its_agent_with_its_tool(
    dev_server_address: str, tmp_path: Path
):
    cli = [sys.executable, "-m", "workers.cli"]
    made = subprocess.run([*cli, "init", "proj"], cwd=tmp_path, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    proj = tmp_path / "proj"
    model = ScriptedModel(
        [tool_call("count_words", {"path": "hello.txt"}), text("hello.txt has 8 words.")]
    ).start()
    tq = f"own-project-{os.getpid()}-{id(tmp_path)}"
    env = project_env(dev_server_address, tq, model.base_url, tmp_path / "state")
    log = tmp_path / "worker.log"
    with log.open("wb") as fh:
        # the console script, as a user runs it: it does not put the working folder on the path
        agentctl = str(Path(sys.executable).with_name("agentctl"))
        worker = subprocess.Popen(
            [agentctl, "worker"], cwd=proj, env=env, stdout=fh, stderr=subprocess.STDOUT
        )
    try:
        run = await asyncio.to_thread(
            subprocess.run,
            [*cli, "run", "--agent", "word-counter", "How many words in hello.txt?", "--json"],
            cwd=proj,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        await asyncio.to_thread(worker.wait, 30)
        model.stop()
    worker_log = log.read_text()
    assert run.returncode == 0, run.stdout + run.stderr + worker_log[-3000:]
    result = json.loads(run.stdout)
    assert result["status"] == "completed" and result["output"] == "hello.txt has 8 words."
    calls = result["tool_calls"]
    assert [(c["name"], c["status"]) for c in calls] == [("count_words", "ok")], calls
    # the project's tool really ran on the project's workspace: its output reached the model
    tool_messages = [m for m in model.last_messages() if m.get("role") == "tool"]
    assert tool_messages and "hello.txt has 8 words" in str(tool_messages[-1]["content"])
    events = [json.loads(line) for line in worker_log.splitlines() if line.startswith("{")]
    added = [e for e in events if e.get("event") == "project_import_path"]
    assert len(added) == 1 and added[0]["folder"] == str(proj.resolve()) and added[0]["added"]
