"""AG-UI (``POST /agui``) over raw HTTP: the update ``add_message`` by update-with-start, approvals
answered one at a time, a rejection, a repeated answer refused."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from temporalio.client import Client

from tests.support.agui import TOKEN, serve, sse, types
from tests.support.harness import Harness, until_state
from workers import client as rc
from workers import conversations
from workers.console.agui import thread_workflow_id
from workers.testing.scripted_model import ScriptedModel, text, tool_calls


async def test_add_message_update_with_start_adds_once_and_refuses_an_ended_run(
    client: Client, tmp_path: Path
):
    """The update itself: the input not added twice, a retry answered once, an ended run refuses."""
    from temporalio.client import WorkflowUpdateFailedError

    from workflows.models import RunRequest

    model = ScriptedModel([text("one"), text("two")])
    async with Harness(client, tmp_path, model) as h:
        wf = f"agui.default.{uuid.uuid4()}"
        req = RunRequest(input="first", input_id="m1", mode="chat", principal_id="pat")
        got = await conversations.converse(client, req, wf, "m1", task_queue=h.task_queue)
        assert (got.duplicate, got.offset) == (True, 0)
        handle = rc.handle(client, wf)
        await until_state(handle, lambda s: s.status == "waiting_for_message")
        nxt = req.model_copy(update={"input": "second", "input_id": None})
        a = await conversations.converse(client, nxt, wf, "m2", task_queue=h.task_queue)
        b = await conversations.converse(client, nxt, wf, "m2", task_queue=h.task_queue)
        assert not a.duplicate and a.offset > 0 and b == a
        await until_state(handle, lambda s: s.status == "waiting_for_message" and s.turn == 2)
        users = [m["content"] for m in await rc.transcript(client, wf) if m["role"] == "user"]
        assert users == ["first", "second"]
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(
                rc.UPDATE_ADD_MESSAGE, {"content": "", "principal_id": "pat"}
            )
        await rc.interrupt(client, wf, "pat", "done")
        res = await handle.result()
        assert res.status == "interrupted"


async def test_two_approvals_answered_one_at_a_time_one_rejected(client: Client, tmp_path: Path):
    """Raw AG-UI over HTTP: an answer that leaves a call waiting ends with that call asked again."""
    model = ScriptedModel(
        [
            tool_calls(
                [
                    ("write_file", {"path": "a.txt", "content": "A"}),
                    ("write_file", {"path": "b.txt", "content": "B"}),
                ]
            ),
            text("wrote a, not b"),
        ]
    )
    async with Harness(client, tmp_path, model) as h:
        runner, url = await serve(client, h)
        thread = str(uuid.uuid4())
        history: list[dict[str, Any]] = []

        async def turn(*new: dict[str, Any]) -> list[dict[str, Any]]:
            history.extend(new)
            body = {"threadId": thread, "runId": str(uuid.uuid4()), "messages": history}
            async with (
                aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
                http.post(f"{url}/agui", json=body) as r,
            ):
                assert r.status == 200
                evs = sse(await r.text())
            calls = [e for e in evs if e["type"] == "TOOL_CALL_START"]
            if calls:
                history.append(
                    {
                        "id": str(uuid.uuid4()),
                        "role": "assistant",
                        "toolCalls": [
                            {
                                "id": c["toolCallId"],
                                "type": "function",
                                "function": {"name": c["toolCallName"], "arguments": "{}"},
                            }
                            for c in calls
                        ],
                    }
                )
            return evs

        def asked(evs: list[dict[str, Any]]) -> list[str]:
            return [
                e["toolCallId"]
                for e in evs
                if e["type"] == "TOOL_CALL_START" and e["toolCallName"] == "approve_tool_call"
            ]

        def answer(call: str, **content: Any) -> dict[str, Any]:
            return {
                "id": str(uuid.uuid4()),
                "role": "tool",
                "toolCallId": call,
                "content": json.dumps(content),
            }

        try:
            evs = await turn({"id": "u1", "role": "user", "content": "write a and b"})
            first, second = asked(evs)
            assert evs[-1]["type"] == "RUN_FINISHED"
            evs = await turn(answer(first, approved=True))
            assert asked(evs) == [second]  # still waiting: asked again, the run ends
            assert evs[-1]["type"] == "RUN_FINISHED"
            assert "TEXT_MESSAGE_CONTENT" not in types(evs)
            evs = await turn(answer(second, approved=False, reason="not b"))
            reply = "".join(e["delta"] for e in evs if e["type"] == "TEXT_MESSAGE_CONTENT")
            assert reply == "wrote a, not b"
            assert (h.workspace / "a.txt").read_text() == "A"
            assert not (h.workspace / "b.txt").exists()
            wf = thread_workflow_id("default", thread)
            res = {r.id: r.status for r in (await rc.state(client, wf)).tool_calls}
            assert sorted(res.values()) == ["ok", "rejected"]
            told = [m["content"] for m in await rc.transcript(client, wf) if m["role"] == "tool"]
            assert any("not b" in t for t in told)
            # the same answer again: refused by the run, reported as RUN_ERROR
            history.append({"id": "u2", "role": "assistant", "content": "wrote a, not b"})
            evs = await turn(answer(second, approved=True))
            assert evs[-1]["type"] == "RUN_ERROR"
            assert not (h.workspace / "b.txt").exists()
        finally:
            await runner.cleanup()
            await client.get_workflow_handle(thread_workflow_id("default", thread)).terminate()


async def test_tools_sent_with_a_later_message_are_offered_from_then_on(
    client: Client, tmp_path: Path
):
    """A thread started without tools; the next request brings one: the model may call it."""
    model = ScriptedModel([text("hi"), tool_calls([("get_time", {})]), text("it is noon")])
    async with Harness(client, tmp_path, model) as h:
        runner, url = await serve(client, h)
        thread = str(uuid.uuid4())
        tool = {"name": "get_time", "description": "The person's clock.", "parameters": {}}
        history: list[dict[str, Any]] = [{"id": "u1", "role": "user", "content": "hello"}]

        async def post(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
            body = {"threadId": thread, "runId": str(uuid.uuid4()), "messages": history,
                    "tools": tools}  # fmt: skip
            async with (
                aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
                http.post(f"{url}/agui", json=body) as r,
            ):
                assert r.status == 200
                return sse(await r.text())

        try:
            assert types(await post([]))[-1] == "RUN_FINISHED"
            assert "get_time" not in {
                t["function"]["name"] for t in h.model.requests[0].body.get("tools", [])
            }
            history += [
                {"id": "a1", "role": "assistant", "content": "hi"},
                {"id": "u2", "role": "user", "content": "what time is it?"},
            ]
            evs = await post([tool])
            call = next(e for e in evs if e["type"] == "TOOL_CALL_START")
            assert call["toolCallName"] == "get_time" and evs[-1]["type"] == "RUN_FINISHED"
            history += [
                {"id": "a2", "role": "assistant", "toolCalls": [{"id": call["toolCallId"],
                 "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
                {"id": "t1", "role": "tool", "toolCallId": call["toolCallId"], "content": "12:00"},
            ]  # fmt: skip
            evs = await post([tool])
            reply = "".join(e["delta"] for e in evs if e["type"] == "TEXT_MESSAGE_CONTENT")
            assert reply == "it is noon"
        finally:
            await runner.cleanup()
            await client.get_workflow_handle(thread_workflow_id("default", thread)).terminate()
