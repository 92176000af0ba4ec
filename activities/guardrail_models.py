"""Guardrails as data: the spec's ``guardrails:`` section and what a tripped guardrail records.

Pure pydantic, imported by the spec (:mod:`activities.spec_agent`), the activity contracts
(:mod:`activities.contracts`) and the workflow. :class:`GuardrailTrip` and the stage and action
names are defined in :mod:`activities.guardrail_trip` (re-exported here). The checks themselves are in
:mod:`activities.guardrails`; docs/guardrails.md describes them.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator

from activities.guardrail_trip import GuardrailAction as GuardrailAction
from activities.guardrail_trip import GuardrailStage as GuardrailStage
from activities.guardrail_trip import GuardrailTrip as GuardrailTrip

__all__ = [
    "BUILTIN_GUARDRAILS",
    "DEFAULT_ACTIONS",
    "DEFAULT_MAX_CHARS",
    "GuardrailCheckInput",
    "GuardrailCheckOutput",
    "PII_KINDS",
    "GuardrailAction",
    "GuardrailEntry",
    "GuardrailStage",
    "GuardrailTrip",
    "GuardrailsSpec",
    "StageGuardrails",
]


BUILTIN_GUARDRAILS = ("secrets", "pii", "injection", "length")
"""Guardrails every worker has (activities/guardrails/_builtin.py)."""
DEFAULT_ACTIONS: dict[str, GuardrailAction] = {
    "secrets": "redact",
    "pii": "redact",
    "injection": "block",
    "length": "block",
}
"""The action of a built-in guardrail whose entry names none (a ``@guardrail``'s own default,
else ``block``, for the others)."""
PII_KINDS = ("email", "phone", "card", "iban")
"""What ``pii`` looks for: e-mail addresses, phone numbers (``phonenumbers``), payment card
numbers that pass the Luhn check and IBANs that pass their check digits (``python-stdnum``)."""
DEFAULT_MAX_CHARS = 20_000
"""``length``'s limit when its entry gives no ``max_chars``."""


class GuardrailEntry(BaseModel):
    """One guardrail of a stage: a name (built in, or a ``@guardrail`` function), an action, options.

    Written in the spec as a bare name (``pii``) or a mapping (``{name: pii, action: flag,
    kinds: [card]}``). Names are checked against the worker's guardrails when the run starts.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1,
        description="secrets, pii, injection, length, or the name of a @guardrail function",
    )
    action: GuardrailAction | None = Field(
        default=None,
        description="block, redact or flag (default: secrets and pii redact, injection and "
        "length block, a @guardrail its own default)",
    )
    kinds: list[Literal["email", "phone", "card", "iban"]] | None = Field(
        default=None, description="pii only: what to look for (default: all four)"
    )
    region: str | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description="pii only: the region (ISO 3166 code, e.g. US, DE) of phone numbers written "
        "without +country code (default: only numbers written with one are found)",
    )
    max_chars: int | None = Field(
        default=None, ge=1, description="length only: most characters allowed (default 20000)"
    )

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _options_fit(self) -> GuardrailEntry:
        if self.name != "pii" and (self.kinds is not None or self.region is not None):
            raise ValueError(f"{self.name}: kinds and region are options of pii only")
        if self.name != "length" and self.max_chars is not None:
            raise ValueError(f"{self.name}: max_chars is an option of length only")
        return self


class GuardrailsSpec(BaseModel):
    """Spec ``guardrails:``: the guardrails of each stage and what a ``block`` does to the run."""

    model_config = ConfigDict(extra="forbid")

    input: list[GuardrailEntry] = Field(
        default_factory=list[GuardrailEntry],
        description="checks of the user's messages (the request, send_message) before the model "
        "reads them",
    )
    tool_results: list[GuardrailEntry] = Field(
        default_factory=list[GuardrailEntry],
        description="checks of each tool result, in the activity that ran the tool, before the "
        "model reads it",
    )
    output: list[GuardrailEntry] = Field(
        default_factory=list[GuardrailEntry],
        description="checks of the model's text, in the model step's activity; its text is then "
        "not streamed live but sent whole once checked",
    )
    on_trip: Literal["end", "pause"] = Field(
        default="end",
        description="what a block does: end the run (status guardrail) or pause it for a person "
        "(resume goes on with the text withheld, interrupt ends it)",
    )

    def stage(self, stage: GuardrailStage) -> list[GuardrailEntry]:
        """The entries of one stage."""
        return cast("list[GuardrailEntry]", getattr(self, stage))


class StageGuardrails(BaseModel):
    """What an activity checks a text with: one stage's entries and the run's secret names."""

    stage: GuardrailStage
    entries: list[GuardrailEntry]
    secrets: list[str] = Field(
        default_factory=list, description="the spec's secrets: (variable names, never values)"
    )


class GuardrailCheckInput(BaseModel):
    """Input of ``guardrail.check``: one user message through the spec's ``input`` guardrails."""

    run_id: str
    turn: int = 0
    tenant_id: str = "default"
    text: str
    guardrails: StageGuardrails

    @property
    def secrets(self) -> list[str]:
        """The spec's secret names (read by the redacting interceptor, activities/redaction.py)."""
        return self.guardrails.secrets


class GuardrailCheckOutput(BaseModel):
    """Result of ``guardrail.check``: the text to pass on and the guardrails it tripped."""

    text: str
    guardrails: list[GuardrailTrip] = Field(default_factory=lambda: list[GuardrailTrip]())
    stage: GuardrailStage = "input"
