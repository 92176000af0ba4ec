"""The four runs that stopped for good under chaos (issue 10 item 0): why, kept as replay tests.

The histories in ``tests/histories/chaos/`` (see its README) were recorded by workflow code of
revision 2 (``PinnedSpec.workflow_rev`` 0). Each holds a workflow task whose commands were
computed by a worker in an activation that replay cannot reproduce: sdk-core (temporalio 1.35.0)
answered a ``state`` query on a worker without the run cached by applying the model step's
completion *before its workflow task started*, at the previous task's ``workflow.now()``; that
worker then ran the next task and sent those commands. Replay applies the completion in its own
task, at that task's start time, and in one activation with an update or signal that task brought,
update first. So no workflow code can replay them: the commands depend on what only that worker
saw (the time, and the job order, which the SDK fixes before any workflow code runs). They stay
here as replay tests that assert exactly that, and as the evidence for the revision-3 fix.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.common import RawValue

from workers.history import load_history_file, replay_file, replay_histories
from workflows.agent_run import AgentRun
from workflows.models import RunResult

CHAOS = Path(__file__).resolve().parents[1] / "histories" / "chaos"

# file stem -> (where replay fails, the nondeterminism message)
FAILURES = {
    "chaos-CH0022Z-4990c224": (48, "Update machine does not handle this event"),
    "chaos-CH0025Z-21f59868": (
        33,
        "UpsertWorkflowSearchAttributesMachine does not handle HistoryEvent(id: 33",
    ),
    "chaos-CH0034Z-6c7be37e": (
        35,
        "UpsertWorkflowSearchAttributesMachine does not handle HistoryEvent(id: 35",
    ),
    "chaos-CH0157Z-f1a4bf3b": (45, "Update machine does not handle this event"),
}

SEEN: list[tuple[str, datetime, bool]] = []  # (what, workflow time, replaying)


@workflow.defn(name="AgentRun", sandboxed=False)  # no re-import: SEEN is this module's
class Recording(AgentRun):
    """The real workflow, noting when it upserts search attributes and asks for approvals."""

    @workflow.init
    def __init__(self, raw: RawValue = None) -> None:  # pyright: ignore[reportArgumentType] - the SDK's default
        super().__init__(raw)
        ctx, model, tools = self._ctx, self._model, self._tools
        upsert, step, await_approvals = (
            ctx.upsert_search_attributes,
            model.step,
            tools._await_approvals,  # noqa: SLF001 - wrapped to observe it
        )

        def upsert_seen(initial: bool = False) -> None:
            SEEN.append((f"upsert {ctx.s.status}", workflow.now(), workflow.unsafe.is_replaying()))
            upsert(initial)

        async def step_seen() -> Any:
            reply = await step()
            SEEN.append((f"step {ctx.s.turn} done", workflow.now(), workflow.unsafe.is_replaying()))
            return reply

        async def approvals_seen() -> None:
            for cid in ctx.s.approvals.pending:
                SEEN.append((f"pending {cid}", workflow.now(), workflow.unsafe.is_replaying()))
            await await_approvals()

        ctx.upsert_search_attributes = upsert_seen
        model.step = step_seen
        tools._await_approvals = approvals_seen

    @workflow.run
    async def run(self, raw: RawValue = None) -> RunResult:  # pyright: ignore[reportArgumentType] - the SDK's default
        return await super().run(raw)


def _prefix(path: Path, last_event: int):
    history = load_history_file(path)
    return type(history)(history.workflow_id, history.events[:last_event])


def _at(path: Path, event_id: int) -> datetime:
    ev = load_history_file(path).events[event_id - 1]
    assert ev.event_id == event_id
    return _ms(ev.event_time.ToDatetime(tzinfo=UTC))


def _ms(t: datetime) -> datetime:
    """To the millisecond (protobuf and the SDK round nanoseconds differently)."""
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


@pytest.mark.parametrize("stem", sorted(FAILURES))
async def test_chaos_history_cannot_replay_and_fails_where_recorded(stem: str):
    """No workflow code replays these (see the module docstring); the failure is the known one."""
    path = CHAOS / f"{stem}.json"
    report = await replay_file(path)
    event_id, message = FAILURES[stem]
    assert not report.compatible
    assert report.failure_type == "NondeterminismError"
    assert message in (report.failure or "")
    assert f"id: {event_id}" in (report.failure or "")
    # everything before the diverging workflow task replays
    started = next(
        e.event_id
        for e in reversed(load_history_file(path).events[:event_id])
        if e.HasField("workflow_task_started_event_attributes")
    )
    ok = await replay_histories([_prefix(path, started - 2)])
    assert ok.compatible, ok.failure


@pytest.mark.parametrize(
    ("stem", "last_seen", "prev_task_started", "task_started"),
    [
        # the history as a query saw it: model step 2 completed (29), its task not started
        ("chaos-CH0025Z-21f59868", 30, 25, 31),
        ("chaos-CH0034Z-6c7be37e", 30, 25, 33),
    ],
)
async def test_the_recorded_commands_come_from_an_activation_at_the_previous_tasks_time(
    stem: str, last_seen: int, prev_task_started: int, task_started: int
):
    """What that worker did, reproduced: model step 2's completion applied before its task
    started runs at the previous task's time, so the 10 s throttle made no upsert, as recorded;
    applied in its own task (replay), it runs at that task's time and upserts."""
    path = CHAOS / f"{stem}.json"
    SEEN.clear()
    await replay_histories([_prefix(path, last_seen)], workflows=[Recording])
    live = [(what, _ms(t)) for what, t, replaying in SEEN if not replaying]
    assert live == [("step 2 done", _at(path, prev_task_started))]
    SEEN.clear()
    await replay_histories([_prefix(path, task_started)], workflows=[Recording])
    live = [(what, _ms(t)) for what, t, replaying in SEEN if not replaying]
    at = _at(path, task_started)
    assert live == [("upsert running", at), ("step 2 done", at)]


@pytest.mark.parametrize(
    ("stem", "last_seen", "prev_task_started", "call_id", "accepted"),
    [
        ("chaos-CH0157Z-f1a4bf3b", 42, 37, "call_ce25dbb2", 47),
        ("chaos-CH0022Z-4990c224", 45, 38, "call_60b09d1a", 50),
    ],
)
async def test_the_decided_call_was_asked_for_outside_a_workflow_task(
    stem: str, last_seen: int, prev_task_started: int, call_id: str, accepted: int
):
    """The approver's ``state`` query could see the call: the model reply was applied before
    the task that carried it started; the update it then sent came with that task, after it
    (accepted at ``accepted``), where replay delivers it first."""
    path = CHAOS / f"{stem}.json"
    ev = load_history_file(path).events[accepted - 1]
    assert ev.HasField("workflow_execution_update_accepted_event_attributes")
    assert (
        call_id
        in ev.workflow_execution_update_accepted_event_attributes.accepted_request.input.args.payloads[
            0
        ].data.decode()
    )
    SEEN.clear()
    await replay_histories([_prefix(path, last_seen)], workflows=[Recording])
    live = [(what, _ms(t)) for what, t, replaying in SEEN if not replaying]
    at = _at(path, prev_task_started)
    assert ("step 3 done", at) in live
    assert (f"pending {call_id}", at) in live
