"""One text through one stage's guardrails: :func:`check`."""

from __future__ import annotations

import asyncio
from typing import Any

from activities.guardrail_models import (
    DEFAULT_ACTIONS,
    GuardrailAction,
    GuardrailEntry,
    GuardrailStage,
    GuardrailTrip,
    StageGuardrails,
)
from activities.guardrails._builtin import BUILTINS
from activities.guardrails._registry import GUARDRAILS, Finding, GuardrailContext
from activities.redaction import REDACTED, redactor_for

__all__ = ["MAX_DETAIL_CHARS", "check", "unknown_guardrails", "withheld"]

MAX_DETAIL_CHARS = 300
"""A trip's detail is cut to this many characters."""

_WHAT = {"input": "message", "tool_results": "tool result", "output": "reply"}


def withheld(stage: GuardrailStage, name: str) -> str:
    """The text that stands for one a ``block`` withheld (what the model or person sees)."""
    return f"[{_WHAT[stage]} withheld: guardrail {name} tripped]"


def unknown_guardrails(entries: list[GuardrailEntry]) -> list[str]:
    """Names of ``entries`` that are neither built in nor registered with ``@guardrail`` here."""
    return [e.name for e in entries if e.name not in BUILTINS and GUARDRAILS.get(e.name) is None]


async def _find(
    entry: GuardrailEntry, text: str, secrets: list[str], ctx: GuardrailContext
) -> tuple[Finding | None, GuardrailAction]:
    """What ``entry``'s guardrail finds in ``text``, and the action it takes.

    A ``@guardrail`` that raises has tripped (``detail`` names the exception type): a check that
    cannot say a text passed does not pass it.
    """
    builtin = BUILTINS.get(entry.name)
    if builtin is not None:
        found = await asyncio.to_thread(builtin, text, entry, secrets)
        return found, entry.action or DEFAULT_ACTIONS[entry.name]
    d = GUARDRAILS.get(entry.name)
    if d is None:  # spec.resolve refuses unknown names; a worker without the module lands here
        return Finding("not registered on this worker"), entry.action or "block"
    action = entry.action or d.action
    args: list[Any] = [text, ctx] if d.takes_context else [text]
    try:
        got = await d.fn(*args) if d.is_async else await asyncio.to_thread(d.fn, *args)
    except Exception as e:  # noqa: BLE001 - a failing check trips (fails closed)
        return Finding(f"the guardrail failed ({type(e).__name__})"), action
    if got is None or got is False:
        return None, action
    if got is True:
        return Finding("tripped"), action
    if isinstance(got, str):
        return Finding(got), action
    if isinstance(got, Finding):
        return got, action
    return Finding(f"the guardrail returned {type(got).__name__}"), action


def _replace(text: str, spans: list[tuple[int, int]], by: str) -> str:
    """``text`` with the (merged) ``spans`` replaced by ``by``."""
    merged: list[tuple[int, int]] = []
    for a, b in sorted((max(0, a), min(len(text), b)) for a, b in spans):
        if a >= b:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    out, at = [], 0
    for a, b in merged:
        out += [text[at:a], by]
        at = b
    out.append(text[at:])
    return "".join(out)


def _safe_detail(detail: str, text: str, found: Finding, secrets: list[str]) -> str:
    """``detail`` without the run's secrets nor any text the finding points at."""
    detail = redactor_for(secrets).redact(str(detail))
    for a, b in found.spans:
        piece = text[max(0, a) : max(0, b)]
        if len(piece) >= 4 and piece in detail:
            detail = detail.replace(piece, REDACTED)
    return detail[:MAX_DETAIL_CHARS]


async def check(
    text: str, guards: StageGuardrails, ctx: GuardrailContext, raw: str | None = None
) -> tuple[str, list[GuardrailTrip]]:
    """Run ``text`` through ``guards``' entries in order; returns the text to pass on and the trips.

    ``redact`` replaces what a guardrail found (``[REDACTED]``; ``length`` cuts the tail; the
    whole text is withheld when a guardrail gives no spans), and later entries see the result;
    ``flag`` records only; ``block`` stops there and returns :func:`withheld`. Each trip's
    detail has no secret and no text the guardrail pointed at.

    ``raw``: the text before the runtime redacted the run's secrets (a tool's output,
    :func:`activities.tools.output.keeping_raw`): ``secrets`` looks there, since ``text`` holds
    ``[REDACTED]`` where they were.
    """
    trips: list[GuardrailTrip] = []
    for entry in guards.entries:
        seen = raw if raw is not None and entry.name == "secrets" else text
        found, action = await _find(entry, seen, guards.secrets, ctx)
        if found is None:
            continue
        detail = _safe_detail(found.detail, seen, found, guards.secrets)
        trips.append(
            GuardrailTrip(stage=guards.stage, guardrail=entry.name, action=action, detail=detail)
        )
        if action == "block":
            return withheld(guards.stage, entry.name), trips
        if action != "redact":
            continue
        if seen is not text:  # the runtime redacted them already; any left are replaced here
            left = (await _find(entry, text, guards.secrets, ctx))[0]
            if left is not None and left.spans:
                text = _replace(text, left.spans, REDACTED)
        elif not found.spans:
            text = withheld(guards.stage, entry.name)
        elif entry.name == "length":
            text = text[: found.spans[0][0]] + f"\n[cut by guardrail length: {detail}]"
        else:
            text = _replace(text, found.spans, REDACTED)
    return text, trips
