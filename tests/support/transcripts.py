"""Transcripts in the chat-completions shape, and a compaction plan with no reserves by default."""

from __future__ import annotations

from typing import Any

from workflows.compaction import CompactionPlan, plan_compaction

Msg = dict[str, Any]


def sys_(text: str = "You are an agent.") -> Msg:
    return {"role": "system", "content": text}


def user(text: str) -> Msg:
    return {"role": "user", "content": text}


def asst(text: str) -> Msg:
    return {"role": "assistant", "content": text}


def calls(*ids: str) -> Msg:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
            for i in ids
        ],
    }


def result(call_id: str, text: str = "ok") -> Msg:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def plan_for(msgs: list[Msg], toks: list[int], window: int, **kw: Any) -> CompactionPlan | None:
    kw.setdefault("tools_tokens", 0)
    kw.setdefault("output_reserve", 0)
    kw.setdefault("threshold", 1.0)
    return plan_compaction(msgs, toks, context_window=window, **kw)
