"""Agents that use agents: the ``subagents`` / ``handoffs`` graph of a spec file and its tools.

An agent's ``subagents: [NAME, ...]`` become tools ``ask_<NAME>`` (argument ``task``) that start
a child ``AgentRun``; its ``handoffs: [NAME, ...]`` become tools ``handoff_to_<NAME>`` that hand
the run to that agent. Both are checked against the spec file's ``agents`` mapping when the spec
is resolved: every name must exist, an agent may not ask itself, sub-agents may not form a
cycle, and the chain of sub-agents below an agent is at most :data:`MAX_SUBAGENT_DEPTH` deep.
Handoffs may go back and forth (A hands to B, B back to A) but not to the agent itself.
"""

from __future__ import annotations

from typing import Any, cast

from activities.contracts import ToolInfo

ASK_PREFIX = "ask_"
HANDOFF_PREFIX = "handoff_to_"
MAX_SUBAGENT_DEPTH = 3
"""Levels of sub-agents below one run at most (its children, their children, ...)."""


class AgentGraphError(ValueError):
    """A ``subagents`` / ``handoffs`` entry names no agent, the agent itself, or closes a cycle."""


def _names(body: Any, key: str) -> list[str]:
    value = cast("dict[str, Any]", body).get(key) if isinstance(body, dict) else None
    items = cast("list[Any]", value) if isinstance(value, list) else []
    return [n for n in items if isinstance(n, str)]


def check_agent_graph(agents: dict[str, Any], agent: str) -> None:
    """Check the sub-agents below ``agent`` and its handoffs in a spec file's ``agents`` mapping.

    Raises:
        AgentGraphError: the message names the field (``agents.A.subagents``) and the problem.
    """
    for key in ("subagents", "handoffs"):
        for name in _names(agents.get(agent), key):
            if name not in agents:
                known = ", ".join(sorted(agents))
                raise AgentGraphError(
                    f"agents.{agent}.{key}: unknown agent {name!r}; defined: {known}"
                )
            if name == agent:
                raise AgentGraphError(f"agents.{agent}.{key}: an agent cannot name itself")
    _walk(agents, [agent])


def _walk(agents: dict[str, Any], path: list[str]) -> None:
    here = path[-1]
    for name in _names(agents.get(here), "subagents"):
        if name in path:
            cycle = " -> ".join([*path[path.index(name) :], name])
            raise AgentGraphError(f"agents.{here}.subagents: sub-agents form a cycle: {cycle}")
        if len(path) > MAX_SUBAGENT_DEPTH:
            chain = " -> ".join([*path, name])
            raise AgentGraphError(
                f"agents.{path[0]}.subagents: sub-agents nest deeper than "
                f"{MAX_SUBAGENT_DEPTH} levels: {chain}"
            )
        if name in agents:
            _walk(agents, [*path, name])


def _about(agents: dict[str, Any], name: str) -> str:
    found = agents.get(name)
    body: dict[str, Any] = cast("dict[str, Any]", found) if isinstance(found, dict) else {}
    text = body.get("description") or body.get("system_prompt") or ""
    return " ".join(str(text).split())[:300]


def agent_tools(agents: dict[str, Any], agent: str) -> list[ToolInfo]:
    """The ``ask_<NAME>`` and ``handoff_to_<NAME>`` tools of ``agent``, in spec order.

    The schemas are pinned with the parent's spec; a child's own spec is resolved and pinned
    when the child starts.
    """
    body = agents.get(agent)
    tools = [
        ToolInfo(
            name=f"{ASK_PREFIX}{name}",
            description=(
                f"Ask the agent {name!r} to carry out a task and return its answer. "
                f"{_about(agents, name)}"
            ).strip(),
            parameters={
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "the task, stated in full"}
                },
                "required": ["task"],
            },
            kind="subagent",
            agent=name,
        )
        for name in _names(body, "subagents")
    ]
    tools += [
        ToolInfo(
            name=f"{HANDOFF_PREFIX}{name}",
            description=(
                f"Hand this conversation over to the agent {name!r}, which continues it with "
                f"its own instructions and tools. {_about(agents, name)}"
            ).strip(),
            parameters={
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "description": "why it should take over"}
                },
            },
            kind="handoff",
            agent=name,
        )
        for name in _names(body, "handoffs")
    ]
    return tools
