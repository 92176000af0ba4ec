"""Guardrails: checks of the user's messages, tool results and the model's text (docs/guardrails.md).

Built in: ``secrets``, ``pii``, ``injection``, ``length`` (:mod:`activities.guardrails._builtin`);
one's own with ``@guardrail`` in a tool module (:mod:`activities.guardrails._registry`). A spec
lists them per stage under ``guardrails:`` (:class:`activities.guardrail_models.GuardrailsSpec`),
each with an action; :func:`check` runs one text through one stage's list. Tool results are
checked in the activity that ran the tool, the model's text in the model step's activity, the
user's messages in activity ``guardrail.check`` before the model reads them; the workflow records
each trip and ends or pauses the run on a ``block``.
"""

from __future__ import annotations

from activities.guardrails._apply import MAX_DETAIL_CHARS, check, unknown_guardrails, withheld
from activities.guardrails._builtin import BUILTINS, INJECTION_MARKERS, find_pii
from activities.guardrails._registry import (
    GUARDRAILS,
    Finding,
    GuardrailContext,
    GuardrailDef,
    guardrail,
)

__all__ = [
    "BUILTINS",
    "GUARDRAILS",
    "INJECTION_MARKERS",
    "MAX_DETAIL_CHARS",
    "Finding",
    "GuardrailContext",
    "GuardrailDef",
    "check",
    "find_pii",
    "guardrail",
    "unknown_guardrails",
    "withheld",
]
