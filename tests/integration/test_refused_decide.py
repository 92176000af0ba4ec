"""A refused ``decide`` is not retryable, from any client (issue #19, item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from tests.support.cli import temporal_cli
from tests.support.harness import Harness, until_state
from workers.testing.scripted_model import ScriptedModel, text, tool_call


async def test_a_refused_decide_is_a_non_retryable_error_naming_the_reason(
    client: Client, tmp_path: Path, dev_server_address: str
):
    model = ScriptedModel([tool_call("write_file", {"path": "a.txt", "content": "x"}), text("ok")])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("write it")
        await until_state(handle, lambda s: s.pending_approvals)
        with pytest.raises(WorkflowUpdateFailedError) as e:
            await handle.execute_update(
                "decide", {"tool_call_id": "call_nope", "decision": "approve", "principal_id": "a"}
            )
        cause = e.value.cause
        assert isinstance(cause, ApplicationError)
        assert cause.non_retryable and cause.type == "DecisionRefused"
        assert "call_nope" in cause.message
        payload = json.dumps({"tool_call_id": "call_nope", "decision": "approve"})
        out = await temporal_cli(
            dev_server_address,
            "update", "execute", "--workflow-id", handle.id, "--name", "decide",
            "--input", payload,
        )  # fmt: skip
        assert out.returncode != 0
        said = out.stdout + out.stderr
        assert "call_nope" in said and "DecisionRefused" in said
        assert "retryable: true" not in said.lower()
        await handle.terminate("test over")
