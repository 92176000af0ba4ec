"""Tools the client runs: the call recorded and published, a durable wait for ``tool_result``.

A tool pinned with ``kind="client"`` (a spec's ``tools: [{name, client: true, ...}]`` entry or
``RunRequest.client_tools``) is not an activity. Once policy and approvals let its call run,
:meth:`ClientTools.run` records it in ``state.pending_client_tools``, emits
``client_tool_requested`` ``{tool_call_id, name, arguments}`` and waits (workflow state and a
timer, so across worker restarts) for update ``tool_result`` ``{tool_call_id, content,
is_error}``. Past the tool's ``timeout_seconds`` the call settles ``timed_out`` and the model is
told. Like a wait for a person, the time waited is not the run's (``max_seconds``).

Who may answer (:meth:`ClientTools.problem`): the run's own principal, or a principal the
policy's approvers for that tool name (``policy.tools.NAME.approvers``, else
``policy.approvers``) allow by the rule of decisions (:func:`workflows.policy.may_decide`: an
empty list lets anyone). The validator of ``tool_result`` refuses, with why, a payload that does
not decode, an unknown call, a call that is not a client tool's, one that does not wait (yet, or
any more: answered, timed out, cancelled) and an unauthorised principal.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import workflows.approvals as approvals
    import workflows.transcript as transcript
    import workflows.turn as turn
    from activities.client_tool_info import client_tool_info
    from activities.client_tools import ClientToolDef
    from activities.contracts import ToolCallRequest, ToolInfo
    from workflows.client_models import PendingClientTool, ToolResultAnswer, ToolResultUpdate
    from workflows.models import ToolCallRecord
    from workflows.policy import may_decide

if TYPE_CHECKING:
    from workflows.run_context import RunContext

__all__ = ["ClientTools", "timed_out_text"]

NOT_SUPPORTED = (
    "Error: this run's workflow version cannot wait for a client tool's result; the call was "
    "not run."
)


def timed_out_text(name: str, seconds: float) -> str:
    """What the model is told when the client gave no result for a ``name`` call in ``seconds``."""
    return (
        f"The client did not return a result for this {name} call within {seconds:g} seconds; "
        "the call timed out and its outcome is unknown."
    )


def result_text(res: ToolResultUpdate, max_chars: int) -> str:
    """The text the model reads: the content (``Error: ...`` for an error), cut to ``max_chars``."""
    text = f"Error: {res.content}" if res.is_error else res.content
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[... cut: the result had {len(text)} characters]"


class ClientTools:
    """Calls of tools the client runs, for one run (``ctx.s`` is the run state)."""

    def __init__(self, ctx: RunContext) -> None:
        """Belong to ``ctx``; no command here."""
        self._ctx = ctx

    def offer(self, sent: list[ClientToolDef], principal_id: str) -> None:
        """Offer the client tools a message brought (``MessageSignal.client_tools``).

        A client tool of the same name is replaced; a name of another of the agent's tools is
        ignored (recorded in ``ignored_signals`` with why). No command: the next model step
        sees the tools.
        """
        s = self._ctx.s
        pinned = s.pinned
        if pinned is None:
            return
        tools = {t.name: t for t in pinned.tools}
        for d in sent:
            have = tools.get(d.name)
            if have is not None and have.kind != "client":
                why = f"client tool {d.name!r} clashes with the agent's tool of that name"
                self._ctx.ignore("send_message", principal_id, why)
                continue
            tools[d.name] = client_tool_info(d)
        pinned.tools = list(tools.values())
        transcript.tools_changed(s)  # the tool schemas changed: count them again

    def approvers(self, name: str) -> list[str]:
        """Who may answer a ``name`` call besides the run's principal (the policy's approvers)."""
        pinned = self._ctx.s.pinned
        if pinned is None:
            return []
        policy = pinned.spec.policy
        entry = policy.tools.get(name)
        if entry is not None and entry.approvers is not None:
            return list(entry.approvers)
        return list(policy.approvers)

    def problem(self, upd: ToolResultUpdate) -> str | None:
        """Why ``upd`` cannot be taken now, or None (the validator's reason)."""
        s, cid = self._ctx.s, upd.tool_call_id
        rec = next((r for r in s.tool_calls if r.id == cid), None)
        if rec is None:
            return f"tool call {cid} is unknown"
        if cid in s.client_calls.client_results:
            return f"tool call {cid} already has its result"
        waiting = s.client_calls.client_waiting.get(cid)
        if waiting is None:
            if rec.status in ("pending", "running"):
                return f"tool call {cid} ({rec.name}) is not waiting for a client's result"
            return f"tool call {cid} already finished ({rec.status})"
        req = s.req
        if req is not None and upd.principal_id == req.principal_id:
            return None
        if s.pinned is None:
            return "the run has no pinned spec yet"
        allowed, why = may_decide(
            s.pinned.spec.policy, waiting.approvers, upd.principal_id, upd.roles
        )
        if allowed:
            return None
        return f"{why}; nor is it the run's principal"

    def unconfirmed(self, tool_call_id: str) -> bool:
        """Whether the call was published outside a workflow task, not yet in history."""
        return tool_call_id in self._ctx.s.approvals.unconfirmed

    def take(self, upd: ToolResultUpdate) -> ToolResultAnswer:
        """Record a result the validator accepted; the waiting call wakes up."""
        self._ctx.s.client_calls.client_results[upd.tool_call_id] = upd
        return ToolResultAnswer(
            tool_call_id=upd.tool_call_id, status="error" if upd.is_error else "ok"
        )

    async def run(self, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo) -> turn.Settled:
        """Publish the call and wait for its result (or the tool's timeout); how it ended.

        Its status (``ok``, ``error``, ``timed_out``), the time waited and the result's size;
        the caller records them and emits ``tool_finished`` (``ToolStep.settle``).

        Raises:
            Stop: ``interrupted`` while waiting (the caller marks the call cancelled).
        """
        ctx = self._ctx
        s, cid = ctx.s, call.id
        started = workflow.now()
        timeout = info.timeout_seconds
        s.client_calls.client_waiting[cid] = PendingClientTool(
            tool_call_id=cid,
            name=call.name,
            arguments=rec.arguments,
            requested_at=started.isoformat(),
            deadline=(started + timedelta(seconds=timeout)).isoformat(),
            turn=s.turn,
            approvers=self.approvers(call.name),
        )
        rec.status = "running"
        if ctx.versions.park_early_decisions and ctx.outside_task:
            # published by an activation outside a workflow task (a query on a worker that
            # rebuilt the run): not in history until the next task (as approvals.py holds)
            approvals.unconfirmed(s, cid)
        ctx.emit("client_tool_requested", tool_call_id=cid, name=call.name, arguments=rec.arguments)
        ctx.publish()
        try:
            await ctx.wait_for_person(
                lambda: cid in s.client_calls.client_results, timeout, f"client tool {call.name}"
            )
        except TimeoutError:
            return turn.Settled(
                "timed_out",
                timed_out_text(call.name, timeout),
                reason=f"no result from the client within {timeout:g} s",
                duration_ms=round((workflow.now() - started).total_seconds() * 1000, 1),
            )
        finally:
            s.client_calls.client_waiting.pop(cid, None)
        res = s.client_calls.client_results[cid]
        return turn.Settled(
            "error" if res.is_error else "ok",
            result_text(res, ctx.pinned().spec.max_tool_output_chars),
            duration_ms=round((workflow.now() - started).total_seconds() * 1000, 1),
            result_chars=len(res.content),
        )
