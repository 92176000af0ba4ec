"""Tool runners: where one allowed or approved tool call runs, all behind one interface.

Once a call may run (the policy allowed it, or a person or the judge approved it), the tool step
(:class:`workflows.tool_calls.ToolStep`) asks :meth:`Runners.choose` for the call's runner, awaits
``runner.run(call, rec, info, announce)`` and records what came back in one place
(``ToolStep.settle``: status, time, files, arguments, the ``tool_finished`` event). A runner
returns either a :class:`~activities.contracts.ToolOutcome` (the tool ran) or a
:class:`workflows.turn.Settled` (how the call ended otherwise: a failure, a child's answer, a
handoff, a client's result, a script's); it never writes how the call ended into its record.

======================  ================  ====================================================
kind                    runner            what runs the call
======================  ================  ====================================================
``activity``            ActivityRunner    activity ``tool.invoke`` (the run's queue or the tool's)
``local_activity``      ActivityRunner    ``tool.invoke`` as a local activity (tools marked
                                          ``local``, revision 4)
``mcp``                 ActivityRunner    ``tool.invoke``; the worker calls the MCP server
``sandbox``             ActivityRunner    ``tool.invoke``; the worker runs it in bubblewrap, and
                                          its time is charged (``workflows/charges.py``)
(held)                  ToolsFirst        not a runner: a turn whose calls would all run as
                                          ``local_activity`` and are all allowed rides the next
                                          model step instead (``workflows/model_step.py``, ``ToolsFirst``,
                                          chosen per turn with :func:`kind_of`)
``child``               ChildRunner       ``ask_<NAME>``: a child run (``workflows/children.py``)
``handoff``             HandoffRunner     ``handoff_to_<NAME>``: noted for the turn's end
``client``              ClientRunner      the client runs it; update ``tool_result``
                                          (``workflows/client_tools.py``)
``script``              ScriptRunner      Code Mode: ``code.step`` activities and the script's
                                          calls (``workflows/code_mode.py``)
``recorded``            RecordedRunner    a replay (``RunRequest.recorded_tools``): the recorded
                                          result, or the live runner when the recording says so
======================  ================  ====================================================

Retries are Temporal's: an activity's retry policy comes from the tool's ``max_attempts``
(``workflows/activity_options.py``). Only held calls retry inside their model step's activity
(``activities/runtime.py``, ``run_first``), because a Temporal retry there would redo the model
call too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError

with workflow.unsafe.imports_passed_through():
    import workflows.activity_options as options
    import workflows.render as render
    import workflows.turn as turn
    from activities.contracts import ToolCallRequest, ToolInfo, ToolOutcome
    from activities.evals.contracts import Recording
    from activities.interfaces import tool_invoke
    from workflows.children import ChildStep
    from workflows.client_tools import NOT_SUPPORTED, ClientTools
    from workflows.code_mode import run_script
    from workflows.handoff import HandoffStep
    from workflows.models import ToolCallRecord
    from workflows.run_context import RunContext, cause_message

if TYPE_CHECKING:
    from workflows.code_mode import ScriptHost

RunnerKind = Literal[
    "activity", "local_activity", "mcp", "sandbox", "child", "handoff", "client", "script",
    "recorded",
]  # fmt: skip
"""Where a call runs (the module docstring's table)."""

Ran = ToolOutcome | turn.Settled
"""What a runner returns: the tool's outcome, or how the call ended otherwise."""


class Runner(Protocol):
    """Runs one call that may run."""

    kind: RunnerKind

    async def run(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo | None, announce: bool
    ) -> Ran:
        """Run ``call`` (record ``rec``; ``info`` None for a tool the spec lacks).

        ``announce``: emit ``tool_started`` (not for a held call, announced when it was held).

        Raises:
            Stop: an interrupt or the deadline (a child run, a client tool, a script).
        """
        ...


def kind_of(info: ToolInfo | None, local_activities: bool) -> RunnerKind:
    """The runner kind of a live call of ``info`` (``local_activities``: revision 4 or later).

    ``local_activity`` for a tool marked ``local`` (``@tool(local=True)``, or the spec's
    ``{name: N, local: true}``; a tool that says nothing is not) without a queue of its own, as
    the read-only built-ins (``list_files``, ``read_file``, ``search_files``, ``calculator``). ``write_file`` is
    not, so its calls run as activity ``tool.invoke``.
    """
    if info is None:  # not in the spec: tool.invoke tells the model the tool is unknown
        return "activity"
    if info.kind == "code":
        return "script"
    if info.kind == "client":
        return "client"
    if info.kind == "subagent":
        return "child"
    if info.kind == "handoff":
        return "handoff"
    if info.sandboxed:
        return "sandbox"
    if info.mcp is not None:
        return "mcp"
    if local_activities and info.local and info.task_queue is None:
        return "local_activity"
    return "activity"


class ActivityRunner:
    """``tool.invoke`` as an activity, or a local activity (kinds activity, local_activity, mcp, sandbox)."""

    kind: RunnerKind

    def __init__(self, ctx: RunContext, kind: RunnerKind) -> None:
        """Run calls for ``ctx``; ``kind`` ``local_activity`` runs them as local activities."""
        self.ctx = ctx
        self.kind = kind

    async def run(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo | None, announce: bool
    ) -> Ran:
        """Schedule ``tool.invoke``; a failure for good settles the call (timed out, cancelled, failed)."""
        ctx = self.ctx
        rec.status = "running"
        ran_with = turn.ran_with(rec)
        arguments: str | dict[str, Any] = ran_with if isinstance(ran_with, dict) else call.arguments
        inp, opts = options.tool_invoke(
            ctx.pinned(), ctx.req(), ctx.s.turn, call, arguments, info, ctx.s.run_files
        )
        if rec.run_arguments is not None:  # a person's edit: the Web UI shows what the model asked
            opts["summary"] = render.tool_summary(call.name, rec.arguments, "(edited at approval)")
        opts = ctx.with_deadline(opts)
        if announce:
            ctx.tool_started(rec)
        try:
            if self.kind == "local_activity":
                return await options.execute_local(tool_invoke, inp, opts)
            return await workflow.execute_activity(tool_invoke, inp, **opts)
        except ActivityError as e:
            at_deadline = ctx.note_deadline(e)  # then the race ends the run: timeout
            msg = cause_message(e)
            settled = turn.settle_failure(
                timed_out=turn.is_timeout_error(e.cause) and not at_deadline,
                # interrupt, max_seconds (a cancel, or the timeout of the time left), cancel
                cancelled=isinstance(e.cause, CancelledError) or at_deadline,
                message=msg,
                attempts=options.tool_attempts(info),
                limit_seconds=info.timeout_seconds if info else None,
            )
            return replace(settled, reason=msg)


class ChildRunner:
    """``ask_<NAME>``: a child run, sharing what is left of the budget with the turn's others."""

    kind: RunnerKind = "child"

    def __init__(self, ctx: RunContext, children: ChildStep) -> None:
        """Start children for ``ctx`` through ``children``."""
        self.ctx = ctx
        self._children = children
        self.share = 1  # children started in this turn (ToolStep.run sets it)

    async def run(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo | None, announce: bool
    ) -> Ran:
        """Run the child to its end; its answer (or why it has none) is the text."""
        assert info is not None  # kind_of gives "child" only for a tool of the spec
        self.ctx.tool_started(rec)
        return await self._children.ask(call, rec, info, self.share)


class HandoffRunner:
    """``handoff_to_<NAME>``: the handover is noted; it happens at the end of the turn."""

    kind: RunnerKind = "handoff"

    def __init__(self, ctx: RunContext, handoffs: HandoffStep) -> None:
        """Note handoffs of ``ctx`` in ``handoffs``."""
        self.ctx = ctx
        self._handoffs = handoffs

    async def run(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo | None, announce: bool
    ) -> Ran:
        """Note the handoff (no command); the text says whether it was taken."""
        assert info is not None
        self.ctx.tool_started(rec)
        return self._handoffs.ask(info.agent or info.name)


class ClientRunner:
    """A tool the client runs: published, then its ``tool_result`` update awaited."""

    kind: RunnerKind = "client"

    def __init__(self, client: ClientTools) -> None:
        """Wait for results through ``client``; :attr:`supported` is set by the tool step."""
        self.client = client
        self.supported: bool | None = None  # patch client-tools, asked before the turn's commands

    async def run(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo | None, announce: bool
    ) -> Ran:
        """Wait for the client's result, or the tool's timeout."""
        assert info is not None
        if not self.supported:  # a history recorded without patch client-tools (none exists)
            return turn.Settled("error", NOT_SUPPORTED)
        return await self.client.run(call, rec, info)


class ScriptRunner:
    """A Code Mode call: its script stepped by ``code.step``; its calls go through ``host``."""

    kind: RunnerKind = "script"

    def __init__(self, host: ScriptHost) -> None:
        """``host`` carries out the calls the script makes (the tool step itself)."""
        self._host = host

    async def run(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo | None, announce: bool
    ) -> Ran:
        """Run the script to its end; the JSON result is the text."""
        assert info is not None
        return await run_script(self._host, call, rec, info)


class RecordedRunner:
    """A replay: a call answered from ``RunRequest.recorded_tools`` instead of running."""

    kind: RunnerKind = "recorded"

    def __init__(self, ctx: RunContext, recording: Recording, live: Runner) -> None:
        """Answer from ``recording``; calls it lets run live go to ``live``."""
        self.ctx = ctx
        self._recording = recording
        self._live = live

    async def run(
        self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo | None, announce: bool
    ) -> Ran:
        """The recorded result (matched by tool and the model's arguments, ``Recording.match``).

        Its record says ``recorded: answered``. Unmatched: a tool error (``recorded:
        unmatched``), or the live runner when the recording lets such calls run
        (``recorded: live``).
        """
        s, recording = self.ctx.s, self._recording
        index = recording.match(call.name, rec.arguments, s.replayed)
        if index is None:
            rec.recorded = "live" if recording.unmatched == "live" else "unmatched"
            if rec.recorded == "live":
                return await self._live.run(call, rec, info, announce)
            self.ctx.tool_started(rec)
            return turn.Settled(
                "error",
                f"Error: this is a replay of a recorded run, and it made no {call.name} call "
                "with these arguments, so there is no result for it. Use the results you have.",
            )
        if index not in s.replayed:
            s.replayed.append(index)
        got = recording.calls[index]
        rec.recorded = "answered"
        self.ctx.tool_started(rec)
        return ToolOutcome(
            call_id=call.id,
            name=call.name,
            status="ok" if got.status == "ok" else "error",
            content=got.result,
            output_chars=len(got.result),
            arguments=got.run_arguments,
        )


class Runners:
    """The runners of one run's tool step; :meth:`choose` picks one per call."""

    def __init__(
        self,
        ctx: RunContext,
        host: ScriptHost,
        children: ChildStep,
        handoffs: HandoffStep,
        client: ClientTools,
    ) -> None:
        """One runner of each kind for ``ctx`` (no command here)."""
        self.ctx = ctx
        self.child = ChildRunner(ctx, children)
        self.client = ClientRunner(client)
        self._by_kind: dict[RunnerKind, Runner] = {
            "activity": ActivityRunner(ctx, "activity"),
            "local_activity": ActivityRunner(ctx, "local_activity"),
            "mcp": ActivityRunner(ctx, "mcp"),
            "sandbox": ActivityRunner(ctx, "sandbox"),
            "child": self.child,
            "handoff": HandoffRunner(ctx, handoffs),
            "client": self.client,
            "script": ScriptRunner(host),
        }

    def choose(self, info: ToolInfo | None) -> Runner:
        """The runner of a call of ``info`` that may run now (a replay's answers first)."""
        live = self._by_kind[kind_of(info, self.ctx.versions.local_tool_activities)]
        recording = self.ctx.req().recorded_tools
        if recording is not None and (info is None or info.kind in ("tool", "subagent")):
            return RecordedRunner(self.ctx, recording, live)
        return live
