"""The run context: one run's state and what every step of it uses (a plain object, no mixin).

:class:`RunContext` holds the run state (:class:`workflows.models.RunData`), its event stream and
its clock, and offers the steps (:mod:`workflows.model_step`, :mod:`workflows.tool_calls`,
:mod:`workflows.compaction_step`, :mod:`workflows.children`, :mod:`workflows.handoff`,
:mod:`workflows.planning`) the few things they share: the pinned spec and request, ``emit`` and
``publish`` (no command), ``enter(status)`` (status, search attributes, Web UI details), ``race``
(an interrupt or the deadline first) and ``wait_for_person``. :class:`workflows.agent_run.AgentRun`
builds one per run and passes it to each step it calls.

Only :meth:`upsert_search_attributes`, the deadline timer and the waits create commands here;
everything else changes state or the event stream and is safe in handlers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    import workflows.state as state
    from activities.contracts import ModelReply
    from activities.spec import PinnedSpec
    from workflows.events import RunEvents
    from workflows.models import (
        IgnoredSignal,
        LiveStatus,
        RunData,
        RunRequest,
        RunStatus,
        ToolCallRecord,
    )
    from workflows.versions import Versions

T = TypeVar("T")

SA_REFRESH_SECONDS = 10.0
"""Least workflow time between two search-attribute refreshes within a turn loop (status changes
and the end of the run always upsert). Before revision 3 only (workflows/versions.py)."""
SA_REFRESH_TURNS = 5
"""Revision 3: TotalTokens and CostUsd are refreshed after every ``SA_REFRESH_TURNS``-th model step."""


class Stop(Exception):
    """Ends the run's loop with a status; :meth:`workflows.agent_run.AgentRun._finish` takes it."""

    status: RunStatus
    reason: str
    error: str | None

    def __init__(self, status: RunStatus, reason: str, error: str | None = None) -> None:
        """``status`` ends the run, ``reason`` says why, ``error`` the failure's message."""
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.error = error


def cause_message(e: ActivityError) -> str:
    """The messages of an activity error's cause chain, joined with ``: ``.

    A message equal to the one before it is said once (a timeout's cause repeats it:
    "activity StartToClose timeout: activity StartToClose timeout").
    """
    cause: BaseException | None = e.cause
    parts: list[str] = []
    while cause is not None:
        text = str(cause)
        if text and (not parts or parts[-1] != text):
            parts.append(text)
        cause = getattr(cause, "cause", None)
    return ": ".join(parts) or str(e)


class RunContext:
    """One run's state, event stream and clock, shared by its steps.

    Attributes:
        s: the run state (replaced as a whole when a continued run takes its carry back).
        events: the run's event stream (:mod:`workflows.events`).
        outside_task: whether this activation runs outside a workflow task (revision 3).
    """

    def __init__(self, s: RunData, events: RunEvents) -> None:
        """Wrap ``s`` and ``events``; creates no command."""
        self.s = s
        self.events = events
        self.versions = Versions(lambda: self.s.pinned)
        """Which behaviour this run takes (workflows/versions.py)."""
        self.release_parked: Callable[[], bool] = lambda: False
        """Applies or drops decisions parked for calls not yet known, where the run waits for a
        person; returns False (``AgentRun.__init__`` sets it to
        :meth:`workflows.approvals.Decisions.release_parked`)."""
        self.outside_task = False
        self._seen: tuple[datetime, int] | None = None  # (time, history length) last seen
        self._deadline: asyncio.Future[None] | None = None
        self._deadline_waited = 0.0
        self._deadline_waits = 0
        self.deadline_hit = False
        """An activity bounded by the deadline timed out (revision 5)."""

    # ------------------------------------------------------------ what the run is

    def pinned(self) -> PinnedSpec:
        """The pinned spec.

        Raises:
            ApplicationError: none pinned yet (cannot happen after the start; fails the run).
        """
        pinned = self.s.pinned
        if pinned is None:
            raise ApplicationError("the run has no pinned spec", non_retryable=True)
        return pinned

    def req(self) -> RunRequest:
        """The start request.

        Raises:
            ApplicationError: none yet (cannot happen after the start; fails the run).
        """
        req = self.s.req
        if req is None:
            raise ApplicationError("the run has no request", non_retryable=True)
        return req

    # ------------------------------------------------------------ what people see

    def emit(self, type: str, **fields: Any) -> None:
        """One event of the run's stream (docs/contract.md "Event stream"); creates no command."""
        turn, events = self.s.turn, self.events
        if type == "status":
            events.status(turn, fields["status"])
        elif type == "model_finished":
            reply: ModelReply = fields["reply"]
            usage = reply.usage.model_dump()
            events.model_finished(turn, reply.model, usage, reply.content, reply.streamed_chars)
        elif type == "run_finished":
            events.finish(turn, fields["result"].model_dump(mode="json"))
        else:
            events.emit(type, turn, **fields)

    def tool_started(self, rec: ToolCallRecord) -> None:
        """Emit ``tool_started`` for the call of ``rec`` (its one builder; creates no command).

        Fields: ``tool_call_id``, ``name``, ``arguments`` (the model's) and ``run_arguments``
        when the call runs with others (a person's edit). ``tool_finished`` is built by
        :func:`activities.rules.tool_finished_fields`.
        """
        fields: dict[str, Any] = {"arguments": rec.arguments}
        if rec.run_arguments is not None:
            fields["run_arguments"] = rec.run_arguments
        self.emit("tool_started", tool_call_id=rec.id, name=rec.name, **fields)

    def publish(self) -> None:
        """The status people see into the stream, and the Web UI's current details."""
        self.emit("status", status=state.shown_status(self.s))
        details = state.details(self.s)
        if details is not None:
            workflow.set_current_details(details)

    def set_status(self, status: LiveStatus | RunStatus) -> None:
        """Set the run's status (no command; the stream dedups an unchanged one)."""
        self.s.status = status
        self.emit("status", status=status)

    def enter(self, status: LiveStatus | RunStatus) -> None:
        """Set the status, upsert what listings show (if it changed), publish."""
        self.set_status(status)
        self.upsert_search_attributes()
        self.publish()

    def ignore(
        self, signal: str, principal_id: str, reason: str, tool_call_id: str | None = None
    ) -> None:
        """Record a signal that changed nothing, with why (``state.ignored_signals``)."""
        self.s.ignored_signals.append(
            IgnoredSignal(
                signal=signal,
                principal_id=principal_id,
                at=workflow.now().isoformat(),
                reason=reason,
                tool_call_id=tool_call_id,
            )
        )
        workflow.logger.info("signal ignored", extra={"signal": signal, "why": reason})

    def show_in_listings(self, search_attributes: bool, now: datetime | None = None) -> None:
        """Whether the namespace has the run's search attributes; ``now``: the last upsert's time."""
        self.s.visibility.search_attributes = search_attributes
        if now is not None:
            self.s.visibility.sa_upserted_at = now

    def shown_at_start(self, shown: dict[str, Any]) -> None:
        """Note what the client set at start as listings show it: no upsert carries it again."""
        self.s.visibility.sa_shown = shown

    def show_started(self, own: dict[SearchAttributeKey[Any], Any]) -> None:
        """The run is running: listings show ``own`` (who, what, status) from now on.

        When the client set exactly these at start, as the run would (``workers.client.start_run``),
        no upsert now (revision 4); the spec hash goes with the first one the run needs. A client
        that set other values (another tenant, say) gets them overwritten.
        """
        started = workflow.info().typed_search_attributes
        if (
            self.versions.upsert_changed_only
            and self.s.visibility.search_attributes
            and all(started.get(key) == value for key, value in own.items())
        ):
            self.shown_at_start({key.name: value for key, value in own.items()})
        else:
            self.upsert_search_attributes(initial=True)

    def refresh_listing(self, ends_turn: bool) -> None:
        """After a model step: TotalTokens and CostUsd stay current in listings, not every turn.

        Each upsert is an event and a visibility write on the server. From revision 3 every
        :data:`SA_REFRESH_TURNS`-th step (by turns: a ``workflow.now()`` difference must not change
        commands), from revision 4 not when the reply ends the turn (``ends_turn``: the status
        upsert that follows carries the same figures in the same workflow task); before, every
        :data:`SA_REFRESH_SECONDS` of workflow time.
        """
        s = self.s
        if self.versions.refresh_by_turns:
            if s.turn % SA_REFRESH_TURNS == 0 and (
                not ends_turn or not self.versions.upsert_changed_only
            ):
                self.upsert_search_attributes()
        elif s.visibility.sa_upserted_at is None or (
            (workflow.now() - s.visibility.sa_upserted_at).total_seconds() >= SA_REFRESH_SECONDS
        ):
            self.upsert_search_attributes()

    def upsert_search_attributes(self, initial: bool = False) -> None:
        """Upsert what listings show; revision 4: only the values that changed, if any.

        Each upsert is a command, an event, a visibility write on the server and a billed
        Temporal Cloud action (docs/throughput.md).
        """
        s = self.s
        if not s.visibility.search_attributes or s.req is None:
            return
        if not self.versions.upsert_changed_only:
            workflow.upsert_search_attributes(  # pyright: ignore[reportUnknownMemberType] - SDK: update type unparameterized
                state.search_attribute_pairs(s, initial)
            )
            s.visibility.sa_upserted_at = workflow.now()
            return
        # all of them, who and what included: what listings already show drops out
        pairs = state.search_attribute_pairs(s, initial=True)
        changed = [p for p in pairs if s.visibility.sa_shown.get(p.key.name, ...) != p.value]
        if not changed:
            return
        workflow.upsert_search_attributes(changed)  # pyright: ignore[reportUnknownMemberType] - as above
        s.visibility.sa_shown.update({p.key.name: p.value for p in changed})
        s.visibility.sa_upserted_at = workflow.now()

    # ------------------------------------------------------------ people and time

    def observe(self) -> bool:
        """Note whether this activation runs outside a workflow task; returns False.

        The one side effect allowed in a wait's condition, because the condition is the only
        code the Python SDK runs in every activation. Each workflow task has a later time than
        the one before; an activation sdk-core makes to answer a query on a worker without the
        run cached, applying events whose task has not started, keeps the last task's time with
        a longer history. Only what is not a command depends on it.
        """
        seen = (workflow.now(), workflow.info().get_current_history_length())
        if self._seen is None or seen[0] != self._seen[0]:
            self.outside_task = False
        elif seen[1] != self._seen[1]:
            self.outside_task = True
        self._seen = seen
        return False

    def remaining_seconds(self) -> float:
        """Seconds of ``max_seconds`` left, time waiting for people not counted."""
        s = self.s
        elapsed = (workflow.now() - s.started_at).total_seconds() - s.person_waits.waited_seconds
        return self.pinned().spec.limits.max_seconds - elapsed

    def deadline_timer(self) -> asyncio.Future[None]:
        """The one timer of ``max_seconds``, re-armed only when time waiting for a person moved it.

        One durable timer for the run instead of one per step: each timer is two events and a
        server task, and almost every step ends long before the deadline.
        """
        waited, waits = self.s.person_waits.waited_seconds, self.s.person_waits.waits
        moved = (
            self._deadline_waits != waits
            if self.versions.deadline_by_events
            else self._deadline_waited != waited
        )
        if self._deadline is None or moved:
            if self._deadline is not None and not self._deadline.done():
                self._deadline.cancel()
            self._deadline_waited = waited
            self._deadline_waits = waits
            self._deadline = asyncio.ensure_future(
                workflow.sleep(
                    max(self.remaining_seconds(), 0.001),
                    summary=f"deadline: max_seconds={self.pinned().spec.limits.max_seconds:g}",
                )
            )
        return self._deadline

    def deadline_passed(self) -> bool:
        """Whether the run is out of time: its deadline timer fired (revision 3) or the clock.

        From revision 5 an activity timed out at the deadline counts too.
        """
        # only events in history (a timer, a timeout) end the run on time
        if self.versions.deadline_by_events:
            deadline = self._deadline
            fired = (
                deadline is not None
                and deadline.done()
                and self._deadline_waits == self.s.person_waits.waits
            )
            return fired or self.deadline_hit
        return self.remaining_seconds() <= 0

    def with_deadline(self, opts: workflow.ActivityConfig) -> workflow.ActivityConfig:
        """``opts`` of an activity raced against the deadline, bounded by the time left.

        From revision 5 the time left is its schedule-to-close timeout; before, the deadline
        timer bounds the activity. Only a timeout's value comes from the clock; which commands follow depends on events.
        """
        if self.versions.deadline_as_timeout:
            opts["schedule_to_close_timeout"] = timedelta(
                seconds=max(self.remaining_seconds(), 0.001)
            )
        return opts

    def note_deadline(self, e: ActivityError) -> bool:
        """Whether ``e`` is an activity's schedule-to-close timeout at the deadline (then noted).

        Only activities given :meth:`with_deadline` have that timeout in this runtime.
        """
        cause: BaseException | None = e.cause
        while self.versions.deadline_as_timeout and cause is not None:
            if (
                isinstance(cause, ActivityTimeoutError)
                and cause.type == TimeoutType.SCHEDULE_TO_CLOSE
            ):
                self.deadline_hit = True
                return True
            cause = getattr(cause, "cause", None)
        return False

    async def race(self, make: Callable[[], Awaitable[T]], bounded: bool = False) -> T:
        """Await ``make()`` unless an interrupt or the deadline comes first (then cancel it).

        ``make()`` may itself wait for a person (a Code Mode script's call that needs approval):
        that time does not count, so while calls wait the deadline is not taken, and a deadline
        re-armed (or passed) during such a wait is re-armed for the time left
        (patch ``race-person-waits``). ``bounded``: ``make()`` only runs activities with
        :meth:`with_deadline` as their schedule-to-close timeout, so from revision 5 no timer
        is started and their timeout ends the run on time.

        Raises:
            Stop: ``interrupted`` or ``timeout``.
        """
        if bounded and self.versions.deadline_as_timeout:
            return await self._race_interrupt(make)
        deadline = self.deadline_timer()  # its timer before make()'s first command
        task: asyncio.Future[T] = asyncio.ensure_future(make())
        while True:
            await workflow.wait_condition(
                lambda d=deadline: (
                    self.observe()
                    or task.done()
                    or self.s.control.interrupt is not None
                    or (
                        d.done()
                        and not self.s.approvals.pending
                        and not self.s.client_calls.client_waiting
                    )
                )
            )
            if task.done():
                return task.result()
            moved = deadline.cancelled() or self.s.person_waits.waits != self._deadline_waits
            if (
                self.s.control.interrupt is None
                and moved
                and self.versions.rearm_after_person_waits()
            ):
                deadline = self.deadline_timer()
                continue
            break
        await _cancel(task)
        if self.s.control.interrupt is not None:
            raise Stop("interrupted", self.s.control.interrupt.reason)
        raise Stop("timeout", "reached max_seconds")

    async def _race_interrupt(self, make: Callable[[], Awaitable[T]]) -> T:
        """:meth:`race` for work its own timeouts bound: only an interrupt is raced.

        Raises:
            Stop: ``interrupted``, or ``timeout`` when an activity timed out at the deadline.
        """
        task: asyncio.Future[T] = asyncio.ensure_future(make())
        await workflow.wait_condition(
            lambda: self.observe() or task.done() or self.s.control.interrupt is not None
        )
        if not task.done():
            await _cancel(task)
            assert self.s.control.interrupt is not None
            raise Stop("interrupted", self.s.control.interrupt.reason)
        try:
            result = task.result()
        except ActivityError as e:
            if self.note_deadline(e):
                raise Stop("timeout", "reached max_seconds") from None
            raise
        if self.deadline_hit:
            raise Stop("timeout", "reached max_seconds")
        return result

    async def wait_for_person(
        self, done: Callable[[], bool], timeout: float | None, what: str = "a person"
    ) -> None:
        """Wait (durably) until ``done()`` or an interrupt; the time waited is not the run's.

        ``what`` names the wait in the timer's summary (Web UI timeline). The workflow seconds
        waited go into ``waited_seconds`` however the wait ends, so ``max_seconds`` counts only
        the run's own time.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
            Stop: ``interrupted``.
        """
        s = self.s
        s.person_waits.waits += 1
        started = workflow.now()
        try:
            await workflow.wait_condition(
                lambda: self.release_parked() or done() or s.control.interrupt is not None,
                timeout=timeout,
                timeout_summary=f"waiting for {what} (timeout)" if timeout is not None else None,
            )
        except GeneratorExit:  # the run left the worker's cache: no workflow clock, no time
            raise
        except BaseException:  # a timeout, a cancellation: the time waited counts all the same
            s.person_waits.waited_seconds += (workflow.now() - started).total_seconds()
            raise
        s.person_waits.waited_seconds += (workflow.now() - started).total_seconds()
        if self.s.control.interrupt is not None:
            raise Stop("interrupted", self.s.control.interrupt.reason)

    async def checkpoint(self) -> None:
        """A safe point: honour interrupt, pause, and the run's deadline.

        Raises:
            Stop: ``interrupted`` or ``timeout``.
        """
        self.release_parked()
        s = self.s
        if s.control.interrupt is not None:
            raise Stop("interrupted", s.control.interrupt.reason)
        if s.control.paused:
            before = s.status
            shown = "budget_paused" if s.budget.budget_paused else "paused"
            self.enter("guardrail_paused" if s.guards.guardrail_paused else shown)
            await self.wait_for_person(lambda: not s.control.paused, None)
            paused = ("paused", "budget_paused", "guardrail_paused")
            self.set_status(before if before not in paused else "running")
            self.upsert_search_attributes()
        if self.deadline_passed():
            raise Stop("timeout", "reached max_seconds")


async def _cancel(task: asyncio.Future[Any]) -> None:
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, CancelledError, ActivityError):
        pass
