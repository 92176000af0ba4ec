"""A hand-written Temporal agent loop: the reference for the worker CPU a run costs.

What a team would write without a runtime: the workflow keeps the chat transcript, calls the model
through an activity (the ``openai`` client against the same chat-completions endpoint, with the
same ``calculator`` tool offered) and runs each tool call as an activity, until the model answers
with text. No spec, no policy, no approvals, no budgets, no events, no redaction, no search
attributes: the floor under ``AgentRun``'s worker CPU for the same model and tool calls
(``bench.cpu.scenario_cpu``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow

HAND_MODEL = "hand.model"
HAND_TOOL = "hand.tool"
CALCULATOR_TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression and return the result.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


class HandRequest(BaseModel):
    """Input of ``HandLoop``: the user's message and the model step limit."""

    input: str
    max_turns: int = 10


_client: Any = None


def configure(model_url: str) -> None:
    """Point the model activity at a chat-completions endpoint (one client per process)."""
    global _client
    from openai import AsyncOpenAI

    _client = AsyncOpenAI(base_url=model_url, api_key="bench", max_retries=0)


@activity.defn(name=HAND_MODEL)
async def hand_model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One chat completion with the calculator offered; returns the assistant message as a dict."""
    r = await _client.chat.completions.create(
        model="scripted", messages=messages, tools=[CALCULATOR_TOOL]
    )
    return r.choices[0].message.model_dump(exclude_none=True)


@activity.defn(name=HAND_TOOL)
async def hand_tool(arguments: str) -> str:
    """The calculator on a tool call's JSON arguments."""
    from activities.tools.builtin import calculator

    return calculator(json.loads(arguments)["expression"])


@workflow.defn(name="BenchHandLoop")
class HandLoop:
    """Model step, then each tool call, until the model answers with text."""

    @workflow.run
    async def run(self, req: HandRequest) -> str:
        """Returns the model's final text."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a benchmark agent. Use the calculator."},
            {"role": "user", "content": req.input},
        ]
        for _ in range(req.max_turns):
            reply = await workflow.execute_activity(
                hand_model, messages, start_to_close_timeout=timedelta(seconds=60)
            )
            messages.append(reply)
            calls = reply.get("tool_calls") or []
            if not calls:
                return str(reply.get("content") or "")
            for call in calls:
                result = await workflow.execute_activity(
                    hand_tool,
                    call["function"]["arguments"],
                    start_to_close_timeout=timedelta(seconds=30),
                )
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        return ""
