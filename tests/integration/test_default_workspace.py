"""A fresh clone: the default agent's workspace does not exist yet, and a run still works."""

from __future__ import annotations

import asyncio
import uuid

from tests.support.harness import write_spec
from workers.client import start_run
from workers.config import Settings
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workers.worker import build_worker
from workflows.models import RunRequest


def _settings(tmp_path, model: ScriptedModel, spec_file, state_dir) -> Settings:
    return Settings(
        openai_base_url=model.base_url,
        openai_api_key="test-key",
        spec_file=str(spec_file),
        task_queue=f"tq-{uuid.uuid4().hex[:8]}",
        tool_modules=["tests.support.tools"],
        default_model="scripted",
        state_dir=str(state_dir),
    )


async def _run(client, settings: Settings, prompt: str):
    worker = build_worker(client, settings)
    async with worker:
        h = await start_run(client, RunRequest(input=prompt), task_queue=settings.task_queue)
        return await asyncio.wait_for(h.result(), timeout=60)


async def test_missing_workspace_in_state_dir_is_created_empty(client, tmp_path):
    state = tmp_path / "state"
    ws = state / "workspace"  # as agents/agents.yml's default agent: inside the state folder
    spec = write_spec(tmp_path, ws)
    model = ScriptedModel([tool_call("list_files", {}), text("The workspace is empty.")])
    model.start()
    try:
        res = await _run(client, _settings(tmp_path, model, spec, state), "what is there?")
    finally:
        model.stop()
    assert res.status == "completed", res
    assert res.output == "The workspace is empty."
    assert ws.is_dir() and list(ws.iterdir()) == []
    assert res.tool_calls[0].status == "ok"


async def test_missing_workspace_elsewhere_fails_saying_how_to_create_it(client, tmp_path):
    state = tmp_path / "state"
    elsewhere = tmp_path / "somewhere" / "ws"
    spec = write_spec(tmp_path, elsewhere)
    model = ScriptedModel([text("never asked")])
    model.start()
    try:
        res = await _run(client, _settings(tmp_path, model, spec, state), "hi")
    finally:
        model.stop()
    assert res.status == "failed"
    assert "does not exist" in (res.error or "") and f"mkdir -p {elsewhere}" in (res.error or "")
    assert not elsewhere.exists()
    assert model.requests == []
