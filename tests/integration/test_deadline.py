"""The run's deadline (``limits.max_seconds``) without a timer (revision 5).

A model step's or a tool call's activity carries the time left as its schedule-to-close timeout;
a deadline timer starts only for work no timeout bounds. Real dev server, scripted model.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle

from tests.support.harness import Harness
from tests.support.subagents import AGENTS, after_tools, by_agent
from workers.testing.scripted_model import ScriptedModel, text, tool_call


async def _events(handle: WorkflowHandle[Any, Any]) -> list[Any]:
    return [ev async for ev in handle.fetch_history_events()]


async def test_a_run_of_activities_has_no_deadline_timer_and_each_step_carries_the_time_left(
    client, tmp_path
):
    model = ScriptedModel(
        [
            tool_call("read_file", {"path": "README.md"}),  # a local activity
            tool_call("slow_echo", {"text": "x", "seconds": 0}),  # an activity
            text("done"),
        ]
    )
    async with Harness(client, tmp_path, model) as h:
        handle = await h.start("go", limits={"max_seconds": 120})
        res = await handle.result()
        events = await _events(handle)
    assert res.status == "completed", res.stopped_reason
    assert [c.status for c in res.tool_calls] == ["ok", "ok"]
    kinds = [ev.event_type for ev in events]
    assert EventType.EVENT_TYPE_TIMER_STARTED not in kinds  # no timer, no action for one
    scheduled = {
        ev.activity_task_scheduled_event_attributes.activity_type.name: ev
        for ev in events
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    assert set(scheduled) == {"model.complete", "tool.invoke"}
    for ev in scheduled.values():
        left = ev.activity_task_scheduled_event_attributes.schedule_to_close_timeout.ToSeconds()
        assert 100 < left <= 120  # the time left of max_seconds, not unbounded


@pytest.mark.parametrize("in_model_step", [True, False])
async def test_max_seconds_ends_a_slow_local_tool_call_with_timeout(
    client, tmp_path, in_model_step
):
    """Whether the call rides the next model step (the default) or is a local activity."""
    agents = {
        "default": {
            "tools": [{"name": "slow_echo", "local": True}],
            "local_tools_in_model_step": in_model_step,
        }
    }
    model = ScriptedModel([tool_call("slow_echo", {"text": "x", "seconds": 30}), text("never")])
    async with Harness(client, tmp_path, model, agents=agents) as h:
        started = time.monotonic()
        handle = await h.start("wait", limits={"max_seconds": 2})
        res = await handle.result()
        elapsed = time.monotonic() - started
        events = await _events(handle)
    assert res.status == "timeout"
    assert res.stopped_reason == "reached max_seconds"
    assert [c.status for c in res.tool_calls] == ["cancelled"]
    assert model.count == 1
    assert elapsed < 20  # the 30 s call was cut at the deadline
    markers = [
        ev
        for ev in events
        if ev.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and ev.marker_recorded_event_attributes.marker_name == "core_local_activity"
    ]
    types = [
        json.loads(m.marker_recorded_event_attributes.details["data"].payloads[0].data)[
            "activity_type"
        ]
        for m in markers
    ]
    if not in_model_step:
        assert types[0] == "spec.resolve" and set(types[1:]) == {"tool.invoke"}, types
        return
    assert types == ["spec.resolve"]
    steps = [
        ev.activity_task_scheduled_event_attributes
        for ev in events
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert [a.activity_type.name for a in steps] == ["model.complete", "model.complete"]
    second = json.loads(steps[1].input.payloads[0].data)
    assert [f["call"]["name"] for f in second["tools_first"]] == ["slow_echo"]
    assert model.count == 1  # cut while the tool ran: the model was not asked again


async def test_a_sub_agent_call_still_races_the_deadline_timer(client, tmp_path):
    """A child run is not bounded by an activity timeout: the parent's deadline is a timer."""
    model = ScriptedModel(
        responder=by_agent(
            {
                "[boss]": after_tools(
                    tool_call("ask_reader", {"task": "read README.md"}), lambda r: text("done")
                ),
                "[reader]": lambda r: text("the answer is 42"),
            }
        )
    )
    async with Harness(client, tmp_path, model, agents=AGENTS) as h:
        handle = await h.start("[boss] work", agent="boss", limits={"max_seconds": 120})
        res = await handle.result()
        events = await _events(handle)
    assert res.status == "completed", res.stopped_reason
    assert [(c.name, c.status) for c in res.tool_calls] == [("ask_reader", "ok")]
    timers = [
        ev.timer_started_event_attributes.start_to_fire_timeout.ToSeconds()
        for ev in events
        if ev.event_type == EventType.EVENT_TYPE_TIMER_STARTED
    ]
    assert len(timers) == 1 and 100 < timers[0] <= 120
