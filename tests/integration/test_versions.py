"""Worker Versioning on the real dev server: a pinned run finishes on its build while new runs
start on the new one; ramp, the runs listed per version, and a rollback."""

from __future__ import annotations

import asyncio
import contextlib
import json

from temporalio.worker import Worker

from activities.runtime import RuntimeActivities
from tests.support.harness import Harness, until_state
from workers import versioning
from workers.cli.versions import overview
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workers.worker import build_workers
from workflows.models import RunResult


async def _retry(fn, timeout: float = 20.0):
    for _ in range(int(timeout / 0.2)):
        try:
            return await fn()
        except Exception:  # noqa: BLE001 - the version is known once its worker polled
            await asyncio.sleep(0.2)
    return await fn()


def _build_of(desc) -> str:
    return desc.raw_description.workflow_execution_info.versioning_info.deployment_version.build_id


async def _eventually(pred, timeout: float = 20.0):
    for _ in range(int(timeout / 0.2)):
        got = await pred()
        if got:
            return got
        await asyncio.sleep(0.2)
    raise AssertionError("never true")


async def test_pinned_run_finishes_on_its_build_ramp_and_rollback(client, tmp_path) -> None:
    model = ScriptedModel(
        scripts={
            "[A]": [tool_call("deploy", {"target": "prod"}), text("deployed")],
            "[B]": [text("hello from B")],
        }
    )
    async with (
        Harness(client, tmp_path, model, worker=False) as h,
        contextlib.AsyncExitStack() as stack,
    ):

        async def start_build(build: str) -> list[Worker]:
            s = h.settings.model_copy(
                update={"worker_versioning": True, "build_id": build, "eval_worker": False}
            )
            runtime = RuntimeActivities(s.spec_file, s.default_model)
            stack.push_async_callback(runtime.aclose)
            workers = build_workers(client, s, runtime=runtime)
            for w in workers:
                await stack.enter_async_context(w)
            return workers

        await start_build("v1")
        await _retry(lambda: versioning.set_current(client, "v1"))
        a = await h.start("[A] deploy please")
        await until_state(a, lambda st: st.status == "awaiting_approval")
        assert _build_of(await a.describe()) == "v1"

        await start_build("v2")
        await _retry(lambda: versioning.set_ramp(client, "v2", 50))
        d = await versioning.describe(client)
        assert d["current"] == "v1" and d["ramping"] == "v2" and d["ramp_percent"] == 50
        await versioning.set_current(client, "v2")
        await versioning.set_current(client, "v2")  # sent again (a lost reply): accepted, no change
        assert (await versioning.describe(client))["current"] == "v2"
        b = await h.start("[B] hi")
        assert (await asyncio.wait_for(b.result(), 30)).output == "hello from B"
        assert _build_of(await b.describe()) == "v2"

        async def a_listed_on_v1():
            o = await overview(client)
            v1 = next(v for v in o["versions"] if v["build_id"] == "v1")
            return a.id in v1["run_ids"] and o

        o = await _eventually(a_listed_on_v1)
        assert o["current"] == "v2"
        await a.signal(
            "approve",
            {
                "tool_call_id": (await until_state(a, lambda st: st.pending_approvals))
                .pending_approvals[0]
                .tool_call_id
            },
        )
        res = await asyncio.wait_for(a.result(), 30)
        assert res.status == "completed" and res.tool_calls[0].status == "ok"
        assert _build_of(await a.describe()) == "v1"  # finished on the build it started on

        assert await versioning.rollback(client) == "v1"
        assert (await versioning.describe(client))["current"] == "v1"


async def test_a_chat_run_moves_to_the_current_build_when_it_continues_as_new(
    client, tmp_path
) -> None:
    script = [text("hi"), tool_call("calculator", {"expression": "1+1"}), text("it is 2")]
    model = ScriptedModel(scripts={"[chat]": script})
    agents = {"default": {"tools": ["calculator"], "limits": {"continue_as_new_every_turns": 1}}}
    async with (
        Harness(client, tmp_path, model, agents=agents, worker=False) as h,
        contextlib.AsyncExitStack() as stack,
    ):
        for build in ("c1", "c2"):
            s = h.settings.model_copy(
                update={"worker_versioning": True, "build_id": build, "eval_worker": False}
            )
            runtime = RuntimeActivities(s.spec_file, s.default_model)
            stack.push_async_callback(runtime.aclose)
            for w in build_workers(client, s, runtime=runtime):
                await stack.enter_async_context(w)
            if build == "c1":
                await _retry(lambda: versioning.set_current(client, "c1"))
                run = await h.start("[chat] hello", mode="chat")
                await until_state(run, lambda st: st.status == "waiting_for_message")
                first = await run.describe()
                assert _build_of(first) == "c1"
        await _retry(lambda: versioning.set_current(client, "c2"))
        await run.signal("send_message", {"content": "what is 1+1?"})
        # the tool turn ends with continue-as-new; the next execution starts on the current build
        latest = client.get_workflow_handle(run.id, result_type=RunResult)
        st = await until_state(
            latest, lambda st: st.status == "waiting_for_message" and st.turn >= 3, timeout=30
        )
        desc = await latest.describe()
        assert desc.run_id != first.run_id and _build_of(desc) == "c2"
        assert st.tool_calls[-1].status == "ok"
        await latest.signal("interrupt", {"reason": "done"})
        assert (await asyncio.wait_for(latest.result(), 30)).status == "interrupted"


async def test_agentctl_versions_lists_builds_and_runs(
    client, tmp_path, dev_server_address
) -> None:
    from tests.support.cli import agentctl

    model = ScriptedModel(
        scripts={"[A]": [tool_call("deploy", {"target": "prod"}), text("deployed")]}
    )
    async with (
        Harness(client, tmp_path, model, worker=False) as h,
        contextlib.AsyncExitStack() as stack,
    ):
        s = h.settings.model_copy(
            update={"worker_versioning": True, "build_id": "cli-1", "eval_worker": False}
        )
        runtime = RuntimeActivities(s.spec_file, s.default_model)
        stack.push_async_callback(runtime.aclose)
        for w in build_workers(client, s, runtime=runtime):
            await stack.enter_async_context(w)
        env = {"TEMPORAL_ADDRESS": dev_server_address, "TEMPORAL_NAMESPACE": "default"}
        r = await agentctl("versions", "current", "cli-1", env=env)
        for _ in range(50):  # the version is known once its worker polled
            if r.returncode == 0:
                break
            await asyncio.sleep(0.2)
            r = await agentctl("versions", "current", "cli-1", env=env)
        assert r.returncode == 0, r.stderr
        run = await h.start("[A] deploy")
        await until_state(run, lambda st: st.status == "awaiting_approval")

        async def listed():
            out = await agentctl("versions", "--json", env=env)
            d = json.loads(out.stdout)
            v = next((v for v in d["versions"] if v["build_id"] == "cli-1"), None)
            return v is not None and run.id in v["run_ids"] and d

        d = await _eventually(listed)
        assert d["deployment"] == "agent-runtime" and d["current"] == "cli-1"
        table = await agentctl("versions", env=env)
        assert table.returncode == 0 and "cli-1" in table.stdout
        await run.signal("interrupt", {"reason": "done"})
