"""Human-readable text for the Temporal Web UI: activity summaries and the run's current details.

Pure functions over run data, so they are unit-tested without a server and safe in workflow code.
"""

from __future__ import annotations

import json
from typing import Any

from workflows.models import PendingApproval, RunRequest, ToolCallRecord

SUMMARY_MAX = 120


def _short(value: Any, limit: int = 40) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def tool_summary(name: str, arguments: dict[str, Any] | str, note: str = "") -> str:
    """``tool: read_file path=README.md start_line=1`` (at most 120 characters, ``note`` kept)."""
    if isinstance(arguments, dict):
        parts = [f"{k}={_short(v)}" for k, v in arguments.items() if v is not None]
        text = f"tool: {name} " + " ".join(parts)
    else:
        text = f"tool: {name} {_short(arguments, 80)}"
    text, room = text.strip(), SUMMARY_MAX - (len(note) + 1 if note else 0)
    text = text if len(text) <= room else text[: room - 1] + "…"
    return f"{text} {note}" if note else text


def tools_first_note(calls: list[tuple[str, dict[str, Any] | str]]) -> str:
    """``after tool: read_file path=README.md`` for a step that runs these calls first.

    One call: its :func:`tool_summary`; more: ``after 3 tools: read_file, calculator``.
    """
    if len(calls) == 1:
        return "after " + tool_summary(*calls[0])
    names = ", ".join(dict.fromkeys(name for name, _ in calls))
    return f"after {len(calls)} tools: {names}"


def model_summary(model: str, turn: int, note: str = "") -> str:
    """``model: qwen2.5-coder-1.5b-instruct turn 3``."""
    return f"model: {model} turn {turn}{(' ' + note) if note else ''}"


def static_summary(req: RunRequest) -> str:
    """One line shown as the workflow's summary in the Web UI's list and header."""
    return f"agent {req.agent} ({req.mode}) for {req.principal_id}@{req.tenant_id}: {_short(req.input, 80)}"


def static_details(req: RunRequest) -> str:
    """Markdown shown once at the top of the run: agent, request, tenant, principal."""
    lines = [
        f"**Agent:** `{req.agent}`  ",
        f"**Mode:** {req.mode}  ",
        f"**Tenant:** `{req.tenant_id}` · **Principal:** `{req.principal_id}`  ",
    ]
    if req.parent_run_id:
        lines.append(f"**Forked from:** `{req.parent_run_id}` at turn {req.fork_turn}  ")
    lines += ["", "**Request:**", "", "> " + req.input.replace("\n", "\n> ")]
    return "\n".join(lines)


def current_details(
    *,
    status: str,
    turn: int,
    max_turns: int,
    model: str,
    total_tokens: int,
    cost_usd: float,
    pending: list[PendingApproval],
    tool_calls: list[ToolCallRecord],
    last_text: str | None,
    spec_hash: str,
) -> str:
    """Markdown kept current by the run: status, turn, tokens and cost, pending approvals."""
    lines = [
        f"### Status: `{status}`",
        "",
        "| turn | model | tokens | cost (USD) | tool calls |",
        "|---|---|---|---|---|",
        f"| {turn} / {max_turns} | `{model}` | {total_tokens} | {cost_usd:.6f} | {len(tool_calls)} |",
        "",
    ]
    if pending:
        lines += [
            "#### Waiting for approval",
            "",
            "| call | tool | arguments | who may approve |",
            "|---|---|---|---|",
        ]
        for p in pending:
            who = ", ".join(p.approvers) if p.approvers else "anyone"
            lines.append(
                f"| `{p.tool_call_id}` | `{p.name}` | `{_short(p.arguments, 60)}` | {who} |"
            )
        lines += [
            "",
            "Approve with signal `approve` and input "
            '`{"tool_call_id": "<call>", "principal_id": "<you>"}` (or `reject` with a `reason`).',
            "",
        ]
    recent = tool_calls[-5:]
    if recent:
        lines += ["#### Recent tool calls", ""]
        for c in recent:
            lines.append(f"- turn {c.turn}: `{tool_summary(c.name, c.arguments)}` → **{c.status}**")
        lines.append("")
    if last_text:
        lines += [
            "#### Last model text",
            "",
            "> " + _short(last_text, 400).replace("\n", "\n> "),
            "",
        ]
    lines.append(f"<sub>spec sha256 `{spec_hash[:12]}`</sub>")
    return "\n".join(lines)
