"""The same agent on the OpenAI Agents SDK's Temporal plugin (``temporalio-openai-agents``).

``PluginAgentRun`` runs ``Runner.run`` on an ``Agent`` with one tool, ``calculator``, turned into a
Temporal activity with ``activity_as_tool`` (the plugin's way to run I/O tools durably, so each turn
is one model activity plus one tool activity, as in ``AgentRun``). The model is the plugin's
``invoke_model_activity`` with ``ModelActivityParameters()`` defaults (start-to-close 60 s, no
heartbeat timeout, Temporal's default retry policy), served by an ``OpenAIProvider`` pointed at
the scripted chat-completions server (``use_responses=False``: the scripted server speaks
chat completions only).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.openai_agents.workflow import activity_as_tool

    from agents import Agent, Runner


class PluginRequest(BaseModel):
    """Input of ``PluginAgentRun``."""

    input: str
    max_turns: int = 10


@activity.defn(name="calculator")
async def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return the result.

    Args:
        expression: the expression, e.g. "2+1".
    """
    from activities.tools.builtin import calculator as calc

    return calc(expression)


@workflow.defn(name="BenchPluginAgentRun")
class PluginAgentRun:
    """One agent run through the plugin's ``TemporalOpenAIRunner``."""

    @workflow.run
    async def run(self, req: PluginRequest) -> str:
        """Run the agent to its final output."""
        agent: Agent[Any] = Agent(
            name="bench",
            instructions="You are a benchmark agent. Use the calculator.",
            model="scripted",
            tools=[activity_as_tool(calculator, start_to_close_timeout=timedelta(seconds=30))],
        )
        result = await Runner.run(agent, input=req.input, max_turns=req.max_turns)
        return str(result.final_output)


def make_plugin(model_url: str) -> Any:
    """``OpenAIAgentsPlugin`` with default parameters and a chat-completions provider."""
    from openai import AsyncOpenAI
    from temporalio.openai_agents import OpenAIAgentsPlugin

    from agents import OpenAIProvider

    provider = OpenAIProvider(
        openai_client=AsyncOpenAI(base_url=model_url, api_key="bench", max_retries=0),
        use_responses=False,
    )
    return OpenAIAgentsPlugin(model_provider=provider)
