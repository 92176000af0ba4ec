"""A signal whose payload cannot be decoded is recorded, not dropped (issue #19, item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import RawValue

from tests.support.harness import Harness, until_state
from tests.support.history import no_task_failed
from workers.testing.scripted_model import ScriptedModel, text, tool_call

SIGNALS = ["approve", "reject", "interrupt", "pause", "resume", "send_message", "raise_budget"]
NOT_JSON = Payload(metadata={"encoding": b"json/plain"}, data=b"\xff\xfe{approve this")
UNKNOWN = Payload(metadata={"encoding": b"application/x-protobuf-ts"}, data=b"\x08\x01")


async def test_every_signal_with_undecodable_bytes_is_recorded_and_the_run_goes_on(
    client: Client, tmp_path: Path
):
    model = ScriptedModel([tool_call("write_file", {"path": "a.txt", "content": "x"}), text("ok")])
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("write it")
        st = await until_state(handle, lambda s: s.pending_approvals)
        call = st.pending_approvals[0].tool_call_id
        for name in SIGNALS:
            for bad in (NOT_JSON, UNKNOWN):
                await handle.signal(name, RawValue(bad))
        with pytest.raises(WorkflowUpdateFailedError) as e:
            await handle.execute_update("decide", RawValue(NOT_JSON))
        assert "cannot be decoded" in str(e.value.cause)
        st = await until_state(handle, lambda s: len(s.ignored_signals) >= 2 * len(SIGNALS))
        seen = {(i.signal, "x-protobuf-ts" in i.reason) for i in st.ignored_signals}
        assert seen == {(n, unknown) for n in SIGNALS for unknown in (False, True)}
        assert all("cannot be decoded" in i.reason for i in st.ignored_signals)
        assert st.status == "awaiting_approval" and not st.paused
        await handle.execute_update(
            "decide", {"tool_call_id": call, "decision": "approve", "principal_id": "alice"}
        )
        res = await handle.result()
        assert res.status == "completed"
        await no_task_failed(handle)
