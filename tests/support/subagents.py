"""Sub-agents: a boss with two children, and responders answering by agent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workers.testing.scripted_model import (
    RecordedRequest,
    Reply,
    _approx_tokens,
    _message_chars,
    error,
)

AGENTS: dict[str, dict[str, Any]] = {
    "boss": {
        "system_prompt": "You are the boss [boss].",
        "subagents": ["reader", "writer"],
        "policy": {"default": "allow"},
    },
    "reader": {"system_prompt": "You study files [reader].", "policy": {"default": "allow"}},
    "writer": {"system_prompt": "You draft notes [writer].", "policy": {"approvers": ["alice"]}},
}


def by_agent(table: dict[str, Callable[[dict[str, Any]], Reply]]) -> Callable[..., Reply]:
    """A responder answering each request by the agent marker in its system prompt."""

    def respond(req: dict[str, Any]) -> Reply:
        system = str((req.get("messages") or [{}])[0].get("content") or "")
        for marker, fn in table.items():
            if marker in system:
                return fn(req)
        return error(400, {"error": {"message": f"no agent for {system!r}"}})

    return respond


def after_tools(first: Reply, then: Callable[[dict[str, Any]], Reply]) -> Callable[..., Reply]:
    """``first`` until a tool result is in the transcript, then ``then(request)``."""

    def respond(req: dict[str, Any]) -> Reply:
        msgs = req.get("messages") or []
        return then(req) if any(m.get("role") == "tool" for m in msgs) else first

    return respond


def usage_of(r: RecordedRequest) -> int:
    """Total tokens the scripted model reported for one request (its own formula)."""
    prompt = _approx_tokens(sum(_message_chars(m) for m in r.messages))
    assert r.reply is not None
    message: dict[str, Any] = {"content": r.reply.content}
    message["tool_calls"] = [
        {"function": {"name": c.name, "arguments": c.arguments}} for c in r.reply.tool_calls
    ]
    return prompt + _approx_tokens(_message_chars(message))
