"""Models at scale: fallbacks, a rate limit held across two workers, tenants as fairness keys."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from temporalio.client import Client

from activities.contracts import fairness_key, model_task_queue
from bench.models import max_in_window, second_client
from tests.support.harness import Harness
from workers.testing.scripted_model import ScriptedModel, error, text, tool_call, tool_calls
from workers.worker import build_model_workers


def _by_model(answers: dict[str, Any]) -> Any:
    def respond(req: dict[str, Any]) -> Any:
        return answers[req["model"]]

    return respond


async def _scheduled(handle: Any) -> list[Any]:
    hist = await handle.fetch_history()
    return [
        e.activity_task_scheduled_event_attributes
        for e in hist.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


async def test_fallback_when_the_first_model_answers_401(client: Client, tmp_path: Path) -> None:
    """401 is not retryable: the step is tried once on `primary`, then on `backup`, which answers."""
    model = ScriptedModel(
        responder=_by_model({"primary": error(401), "backup": text("answer from backup")})
    )
    agents = {"default": {"model": ["primary", "backup"]}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        res = await h.run("hello")
    assert res.status == "completed", res.error
    assert res.output == "answer from backup"
    assert [r.body["model"] for r in model.requests] == ["primary", "backup"]
    assert [(s["turn"], s["model"]) for s in res.model_steps] == [(1, "backup")]
    assert res.model_steps[0]["usage"]["total_tokens"] > 0
    assert res.model_steps[0]["duration_ms"] >= 0


async def test_fallback_after_retries_are_exhausted(client: Client, tmp_path: Path) -> None:
    """A 503 is retried `model_max_attempts` times on the primary, then the fallback answers."""
    model = ScriptedModel(
        responder=_by_model({"primary": error(503), "backup": text("second model")})
    )
    agents = {"default": {"model": ["primary", "backup"], "model_max_attempts": 2}}
    async with Harness(client, tmp_path, model, agents=agents) as h:
        res = await h.run("hello")
    assert res.status == "completed", res.error
    assert [r.body["model"] for r in model.requests] == ["primary", "primary", "backup"]
    assert res.model_steps[0]["model"] == "backup"


async def test_every_model_failing_fails_the_run(client: Client, tmp_path: Path) -> None:
    model = ScriptedModel(responder=_by_model({"a": error(401), "b": error(403)}))
    async with Harness(client, tmp_path, model, agents={"default": {"model": ["a", "b"]}}) as h:
        res = await h.run("hello")
    assert res.status == "failed"
    assert "403" in (res.error or "")
    assert [r.body["model"] for r in model.requests] == ["a", "b"]
    assert res.model_steps == []


async def test_model_steps_name_each_step_model(client: Client, tmp_path: Path) -> None:
    """Each later step starts again from the primary; every step is recorded."""
    model = ScriptedModel(
        [
            tool_call("calculator", {"expression": "1+1"}),
            text("two"),
        ]
    )
    async with Harness(client, tmp_path, model) as h:
        res = await h.run("add")
    assert res.status == "completed"
    assert [(s["turn"], s["model"]) for s in res.model_steps] == [(1, "scripted"), (2, "scripted")]


async def test_tenant_is_the_fairness_key_of_every_activity(client: Client, tmp_path: Path) -> None:
    """Every activity the run schedules carries the tenant; ``spec.resolve`` and a local tool
    (``calculator``) run on the worker of the run's workflow task, which carries it too."""
    model = ScriptedModel(
        [
            tool_calls([("calculator", {"expression": "2*3"}), ("record", {"label": "x"})]),
            text("six"),
        ]
    )
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("multiply", tenant_id="acme")
        res = await handle.result()
    assert res.status == "completed"
    scheduled = await _scheduled(handle)
    types = {a.activity_type.name for a in scheduled}
    assert {"model.complete", "tool.invoke"} <= types and "spec.resolve" not in types
    assert [a.priority.fairness_key for a in scheduled] == ["acme"] * len(scheduled)
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in (await handle.fetch_history()).events
        if e.HasField("marker_recorded_event_attributes")
    ]
    assert markers.count("core_local_activity") == 2  # spec.resolve and calculator
    started = (await handle.fetch_history()).events[0].workflow_execution_started_event_attributes
    assert started.priority.fairness_key == "acme"  # its workflow tasks too (workers.client)


async def test_long_tenant_id_gets_a_short_stable_fairness_key(
    client: Client, tmp_path: Path
) -> None:
    tenant = "tenant-" + "x" * 100
    async with Harness(client, tmp_path, ScriptedModel([text("ok")])) as h:
        handle = await h.start("hi", tenant_id=tenant)
        res = await handle.result()
    assert res.status == "completed"
    keys = {a.priority.fairness_key for a in await _scheduled(handle)}
    assert keys == {fairness_key(tenant)}
    assert len(fairness_key(tenant).encode()) <= 64 and fairness_key(tenant) != fairness_key(
        tenant + "y"
    )


async def test_rate_limit_holds_across_two_workers(client: Client, tmp_path: Path) -> None:
    """Two workers poll the model's queue; the server dispatches at most R per second in total.

    Temporal's matching service limits a task queue with a token bucket of rate R whose burst is
    about one second of tokens, so any window of T seconds holds at most R*T + R + 1 dispatches
    (measured on this server: 5 at once, then 4 a second, for R = 4). Requests are timed by the
    scripted model as they arrive (its request log); nothing here times our own code.
    """
    rps, runs = 4.0, 20
    model = ScriptedModel(responder=lambda _req: text("ok"))
    top = {"rate_limits": {"limited": {"requests_per_second": rps}}}
    async with Harness(
        client, tmp_path, model, agents={"default": {"model": "limited"}}, top=top
    ) as h:
        other = await second_client(client)
        workers = build_model_workers(other, h.settings)
        tasks = [asyncio.ensure_future(w.run()) for w in workers]
        try:
            handles = await asyncio.gather(*(h.start(f"r{i}") for i in range(runs)))
            results = await asyncio.wait_for(
                asyncio.gather(*(x.result() for x in handles)), timeout=60
            )
        finally:
            for w in workers:
                await w.shutdown()
            await asyncio.gather(*tasks)
    assert [r.status for r in results] == ["completed"] * runs
    times = [r.received_at for r in model.requests]
    assert len(times) == runs
    for window in (1.0, 2.0, 3.0):
        assert max_in_window(times, window) <= rps * window + rps + 1, (window, times)
    # and the limit is what held them back: 20 requests took at least (20 - burst) / R seconds
    assert max(times) - min(times) >= (runs - rps - 1) / rps - 0.1
    queue = model_task_queue(h.task_queue, "limited")
    identities: set[str] = set()
    for x in handles:
        model_steps: set[int] = set()
        for e in (await x.fetch_history()).events:
            if e.HasField("activity_task_scheduled_event_attributes"):
                a = e.activity_task_scheduled_event_attributes
                if a.activity_type.name == "model.complete":
                    assert a.task_queue.name == queue
                    model_steps.add(e.event_id)
            if e.HasField("activity_task_started_event_attributes"):
                started = e.activity_task_started_event_attributes
                if started.scheduled_event_id in model_steps:
                    identities.add(started.identity)
    assert "second-worker" in identities and len(identities) == 2, identities
