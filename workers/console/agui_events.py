"""The AG-UI events of one ``POST /agui`` response, translated from the run's event stream.

:class:`AguiStream` writes AG-UI events (``ag_ui.core``, encoded by ``ag_ui.encoder.EventEncoder``)
and remembers what it opened; :func:`follow` translates the run's events (docs/contract.md "Event
stream") from an offset until the run waits for the front end or ends. The table of what becomes
what is in :mod:`workers.console.agui` and docs/agui.md.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from aiohttp import web
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from workers import client as rc
from workers.console.events import event_stream

if TYPE_CHECKING:
    from ag_ui.core import BaseEvent

__all__ = [
    "APPROVAL_PREFIX",
    "APPROVAL_TOOL",
    "IDLE_CHECK_SECONDS",
    "WAITING",
    "AguiStream",
    "follow",
    "text_of",
]

APPROVAL_TOOL = "approve_tool_call"
"""Name of the tool call through which the front end answers an approval."""
APPROVAL_PREFIX = "approve-"
"""``toolCallId`` of an approval's tool call: this prefix, then the run's tool call id."""
IDLE_CHECK_SECONDS = 2.0
"""With no event for this long, the adapter asks the run's state (a query) whether it waits for
the front end, and sends a keep-alive comment."""
WAITING = frozenset({"waiting_for_message", "awaiting_approval", "paused", "budget_paused"})
"""Statuses in which the run waits for someone: the AG-UI run ends there."""


def text_of(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list joined."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content or []:
        text = getattr(part, "text", None)
        if isinstance(text, str):
            parts.append(text)
    return "\n".join(parts)


@dataclass
class AguiStream:
    """One AG-UI response: where it writes, the AG-UI state it showed, what it opened."""

    resp: web.StreamResponse
    thread_id: str
    run_id: str
    workflow_id: str
    state: dict[str, Any] = field(default_factory=dict[str, Any])
    text_id: str | None = None
    calls: set[str] = field(default_factory=set[str])
    answered: set[str] = field(default_factory=set[str])

    async def send(self, event: BaseEvent) -> None:
        """Write one AG-UI event (``data: <JSON>``, camelCase fields)."""
        from ag_ui.encoder import EventEncoder

        await self.resp.write(EventEncoder().encode(event).encode())

    async def end_text(self) -> None:
        """``TEXT_MESSAGE_END`` of the open text message, if one is open."""
        from ag_ui.core import TextMessageEndEvent

        if self.text_id is not None:
            await self.send(TextMessageEndEvent(message_id=self.text_id))
            self.text_id = None

    async def text(self, ev: dict[str, Any]) -> None:
        """A ``text_delta``: ``TEXT_MESSAGE_CONTENT``, after a ``START`` when none is open."""
        from ag_ui.core import TextMessageContentEvent, TextMessageStartEvent

        delta = ev.get("delta")
        if not isinstance(delta, str) or not delta:
            return
        if self.text_id is None:
            self.text_id = f"{self.workflow_id}/msg-{ev.get('offset', 0)}"
            await self.send(TextMessageStartEvent(message_id=self.text_id, role="assistant"))
        await self.send(TextMessageContentEvent(message_id=self.text_id, delta=delta))

    async def tool_call(self, call_id: str, name: str, args: Any) -> None:
        """``TOOL_CALL_START``/``ARGS``/``END`` once per call id."""
        from ag_ui.core import ToolCallArgsEvent, ToolCallEndEvent, ToolCallStartEvent

        if call_id in self.calls:
            return
        self.calls.add(call_id)
        await self.end_text()
        await self.send(ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name))
        await self.send(
            ToolCallArgsEvent(
                tool_call_id=call_id, delta=args if isinstance(args, str) else json.dumps(args)
            )
        )
        await self.send(ToolCallEndEvent(tool_call_id=call_id))

    async def approval(self, call_id: str, name: str, args: Any) -> None:
        """A call waiting for approval, as a call of :data:`APPROVAL_TOOL`."""
        await self.tool_call(
            APPROVAL_PREFIX + call_id,
            APPROVAL_TOOL,
            {"tool_call_id": call_id, "name": name, "arguments": args},
        )

    async def result(self, ev: dict[str, Any]) -> None:
        """A ``tool_finished``: ``TOOL_CALL_RESULT`` (not for calls the front end answered)."""
        from ag_ui.core import ToolCallResultEvent

        call_id = str(ev.get("tool_call_id", ""))
        if not call_id or call_id in self.answered:
            return  # the front end's own answer (a client tool): it has the tool message already
        await self.tool_call(call_id, str(ev.get("name", "")), ev.get("arguments", {}))
        content = ev.get("result")
        if not isinstance(content, str):
            content = json.dumps({"status": ev.get("status")})
        await self.send(
            ToolCallResultEvent(
                message_id=f"{self.workflow_id}/result-{call_id}",
                tool_call_id=call_id,
                content=content,
                role="tool",
            )
        )

    async def update_state(self, **changes: Any) -> None:
        """``STATE_DELTA`` replacing the top-level keys that changed."""
        from ag_ui.core import StateDeltaEvent

        ops = [
            {"op": "replace" if k in self.state else "add", "path": f"/{k}", "value": v}
            for k, v in changes.items()
            if self.state.get(k) != v
        ]
        if ops:
            self.state.update(changes)
            await self.send(StateDeltaEvent(delta=cast("Any", ops)))


def state_of(run_id: str, st: Any) -> dict[str, Any]:
    """The AG-UI state of a run from its ``state`` query."""
    return {
        "run_id": run_id,
        "status": st.status,
        "turn": st.turn,
        "usage": st.usage.model_dump(mode="json"),
        "pending_approvals": [
            {"tool_call_id": p.tool_call_id, "name": p.name, "arguments": p.arguments}
            for p in _undecided(st)
        ],
    }


def _undecided(st: Any) -> list[Any]:
    """``state.pending_approvals`` less those decided already.

    A run drops them from the list only once every call of the turn has its verdict.
    """
    decided = {d.tool_call_id for d in st.decisions}
    return [p for p in st.pending_approvals if p.tool_call_id not in decided]


def _pending_client_tools(st: Any) -> list[Any]:
    """``state.pending_client_tools``: client tools' calls waiting for ``tool_result``."""
    return list(st.pending_client_tools)


async def waiting_calls(out: AguiStream, st: Any) -> None:
    """Tool calls for what the run waits on: its pending approvals and client tools' calls."""
    for p in _undecided(st):
        await out.approval(p.tool_call_id, p.name, p.arguments)
    for p in _pending_client_tools(st):
        await out.tool_call(p.tool_call_id, p.name, p.arguments)


async def finish(out: AguiStream, result: Any = None) -> None:
    from ag_ui.core import RunFinishedEvent

    await out.end_text()
    await out.send(RunFinishedEvent(thread_id=out.thread_id, run_id=out.run_id, result=result))


async def error(out: AguiStream, e: BaseException, code: str | None = None) -> None:
    from ag_ui.core import RunErrorEvent

    if isinstance(e, RPCError):
        msg = e.message
    elif isinstance(e, WorkflowUpdateFailedError):
        msg = str(e.cause or e)
    else:
        msg = str(e)
    await out.end_text()
    await out.send(RunErrorEvent(message=msg, code=code or type(e).__name__))


class _Follower:
    """The run's events of one response, one at a time; :meth:`on` says when to stop."""

    def __init__(self, client: Any, out: AguiStream) -> None:
        self.client, self.out = client, out
        self.usage: dict[str, Any] = dict(out.state.get("usage") or {})
        self.pending: list[dict[str, Any]] = list(out.state.get("pending_approvals") or [])
        self.saw_running = False

    async def stop_waiting(self) -> None:
        """The run waits for the front end: the calls it waits on, the state, ``RUN_FINISHED``."""
        st = await rc.state(self.client, self.out.workflow_id)
        await waiting_calls(self.out, st)
        await self.out.update_state(**state_of(self.out.workflow_id, st))
        await finish(self.out)

    async def idle(self) -> bool:
        """No event for a while: a keep-alive; True (after :meth:`stop_waiting`) if it waits."""
        await self.out.resp.write(b": keepalive\n\n")
        st = await rc.state(self.client, self.out.workflow_id)
        # a wait this request did not end (an approval it left unanswered, a pause), or one that
        # came without a status event; the next message only once the run took ours
        waits = st.status in WAITING and (self.saw_running or st.status != "waiting_for_message")
        if waits or _pending_client_tools(st):
            await self.stop_waiting()
            return True
        return False

    async def on(self, ev: dict[str, Any]) -> bool:
        """Translate one run event; True when the response has ended."""
        out, kind = self.out, ev.get("type")
        call_id, name, args = str(ev.get("tool_call_id")), str(ev.get("name")), ev.get("arguments")
        if kind == "text_delta":
            await out.text(ev)
        elif kind in ("model_retry", "model_finished"):
            await self.step_done(ev)
        elif kind == "tool_started":
            await out.tool_call(call_id, name, args if args is not None else {})
        elif kind == "tool_finished":
            await out.result(ev)
        elif kind == "approval_requested":
            await out.approval(call_id, name, args if args is not None else {})
            self.pending.append({"tool_call_id": call_id, "name": name, "arguments": args})
            await out.update_state(pending_approvals=list(self.pending))
        elif kind == "approval_decided":
            self.pending = [p for p in self.pending if p["tool_call_id"] != call_id]
            await out.update_state(pending_approvals=list(self.pending))
        elif kind == "client_tool_requested":
            await out.tool_call(call_id, name, args if args is not None else {})
            await self.stop_waiting()
            return True
        elif kind == "status":
            return await self.status(ev)
        elif kind == "run_finished":
            await self.finished(ev)
            return True
        return False

    async def step_done(self, ev: dict[str, Any]) -> None:
        """A model step ended (or is retried): end its text, add its usage."""
        await self.out.end_text()
        step = ev.get("usage")
        if isinstance(step, dict):
            for k, v in step.items():
                if isinstance(v, int | float) and not isinstance(v, bool):
                    self.usage[str(k)] = self.usage.get(str(k), 0) + v
            await self.out.update_state(usage=dict(self.usage), turn=ev.get("turn"))

    async def status(self, ev: dict[str, Any]) -> bool:
        """A ``status``: a state delta; True (the response ended) when the run now waits."""
        status = ev.get("status")
        await self.out.update_state(status=status, turn=ev.get("turn"))
        if status == "running":
            self.saw_running = True
        elif status in WAITING:
            if status == "awaiting_approval":
                await self.stop_waiting()
            else:
                await finish(self.out)
            return True
        return False

    async def finished(self, ev: dict[str, Any]) -> None:
        """``run_finished``: ``RUN_FINISHED`` when completed, else ``RUN_ERROR``."""
        raw = ev.get("result")
        res: dict[str, Any] = cast("dict[str, Any]", raw) if isinstance(raw, dict) else {}
        status = res.get("status")
        await self.out.update_state(status=status)
        if status == "completed":
            await finish(self.out, {"output": res.get("output"), "run_id": self.out.workflow_id})
        else:
            reason = res.get("stopped_reason") or status
            await error(self.out, RuntimeError(f"the run ended {status}: {reason}"), str(status))


async def follow(client: Any, out: AguiStream, offset: int, live_secret: bytes | None) -> None:
    """Translate the run's events from ``offset`` until it waits for the front end or ends."""
    f = _Follower(client, out)
    events = event_stream(
        client, out.workflow_id, offset, 0, live_secret, quiet_seconds=IDLE_CHECK_SECONDS
    )
    async with contextlib.aclosing(events):  # the live reader's connections close with the reply
        async for ev in events:
            if await (f.idle() if ev is None else f.on(ev)):
                return
    await finish(out)
