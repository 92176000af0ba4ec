"""What a tripped guardrail records (:class:`GuardrailTrip`), and the names of stages and actions.

Defined apart from the spec's guardrail models (:mod:`activities.guardrail_models`, which
re-exports these names) so that a client that reads a run's state or result
(:mod:`workflows.view_models`, ``agentctl status``) does not build them (issue #35).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

__all__ = ["GuardrailAction", "GuardrailStage", "GuardrailTrip"]

GuardrailStage = Literal["input", "tool_results", "output"]
"""Where a guardrail looks: the user's messages, each tool result before the model reads it, and
the model's text (the answer, and any text beside tool calls)."""
GuardrailAction = Literal["block", "redact", "flag"]
"""``block``: the text is withheld and the run ends (status ``guardrail``) or pauses for a person
(``on_trip``); ``redact``: what was found is replaced and the run goes on; ``flag``: only recorded."""


class GuardrailTrip(BaseModel):
    """A guardrail that tripped, as the run records it.

    In ``RunResult.guardrails``, the event stream (``guardrail_tripped``) and the audit.

    ``detail`` says what was found without the matched text of a secret or personal datum
    (``2 card numbers``, ``the value of OPENAI_API_KEY``).
    """

    stage: GuardrailStage
    guardrail: str
    action: GuardrailAction
    detail: str
    tool_call_id: str | None = None
    turn: int = 0
