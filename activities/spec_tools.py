"""Which tools and guardrails an agent's spec pins, checked when ``spec.resolve`` runs."""

from __future__ import annotations

from activities.client_tool_info import client_tool_info
from activities.contracts import ClientToolDef, ToolInfo
from activities.spec import AgentSpec, SpecError


def check_guardrail_names(spec: AgentSpec) -> None:
    """Every guardrail the spec names is built in or registered with ``@guardrail`` here.

    Raises:
        SpecError: names one that is neither (the message lists those this worker has).
    """
    if spec.guardrails is None:
        return
    from activities.guardrails import BUILTINS, GUARDRAILS, unknown_guardrails

    for stage in ("input", "tool_results", "output"):
        entries = spec.guardrails.stage(stage)
        unknown = unknown_guardrails(entries)
        if unknown:
            i = next(n for n, e in enumerate(entries) if e.name == unknown[0])
            raise SpecError(
                f"agents.{spec.name}.guardrails.{stage}.{i}: unknown guardrail {unknown[0]!r}; "
                f"built in: {', '.join(BUILTINS)}; registered with @guardrail on this worker: "
                f"{', '.join(GUARDRAILS.names()) or 'none'} (from tool_modules)"
            )


def only_tools(tools: list[ToolInfo], names: list[str] | None, agent: str) -> list[ToolInfo]:
    """``tools`` restricted to ``names`` (``RunRequest.tools``), in the spec's order; None: all.

    Raises:
        SpecError: a name is not one of the agent's tools.
    """
    if names is None:
        return tools
    have = {t.name for t in tools}
    missing = [n for n in names if n not in have]
    if missing:
        raise SpecError(
            f"agents.{agent}: the run asks for tool(s) {', '.join(missing)} the agent does not have"
        )
    return [t for t in tools if t.name in set(names)]


def client_tools(
    spec: AgentSpec, tools: list[ToolInfo], sent: list[ClientToolDef] | None
) -> list[ToolInfo]:
    """The tools the client runs: the spec's ``client: true`` entries, then those ``sent``.

    ``sent`` is ``RunRequest.client_tools`` (a front end's own tools, e.g. AG-UI ``tools``).

    Raises:
        SpecError: a client tool's name is one of the agent's other tools, or sent twice.
    """
    out = [client_tool_info(d) for d in spec.client_tools.values()]
    taken = {t.name for t in tools} | {t.name for t in out}
    for d in sent or []:
        if d.name in taken:
            raise SpecError(
                f"agents.{spec.name}: client tool {d.name!r} clashes with a tool of the same name"
            )
        taken.add(d.name)
        out.append(client_tool_info(d))
    return out
