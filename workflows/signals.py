"""Payloads of the run's signals and of update ``decide`` (docs/contract.md, "Signals").

Re-exported by :mod:`workflows.models`, where they were defined before.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from activities.client_tools import ClientToolDef


class SignedDecision(BaseModel):
    """Fields of a decision signed where the spec requires it (activities/signing.py)."""

    signature: str | None = Field(
        default=None, description="base64 Ed25519 signature of the decision"
    )
    signed_at: str | None = Field(
        default=None, description="ISO-8601 time the signer put in the signature"
    )
    roles: list[str] = Field(
        default_factory=list,
        description="the decider's roles as their identity provider states them (the console: "
        "the token's `roles` claim or the proxy's `role:` groups); an approver `role:NAME` "
        "accepts a decision naming NAME here. Signed with the decision where the spec requires "
        "signatures; otherwise as trusted as principal_id, i.e. as the namespace's clients",
    )


DECISION_REFUSED = "DecisionRefused"
"""Error type of a ``decide`` the validator refused: not retryable, the message says why."""
DECISION_NOT_YET_RECORDED = "DecisionNotYetRecorded"
"""Error type of a ``decide`` for a request made outside a workflow task: retry (client.decide does)."""

MAX_DECISION_ARGUMENTS_BYTES = 256 * 1024
"""Largest edited ``arguments`` (as JSON) a decision may carry: 256 KiB. They go into the tool
call's activity input; the Temporal server refuses a workflow task whose payloads pass 2 MB (its
default ``limit.blobSize.error``), so 1 MB of arguments, accepted, failed every task after it."""


def _bounded_arguments(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None:
        try:
            size = len(json.dumps(value, ensure_ascii=False).encode("utf-8", "replace"))
        except RecursionError:
            raise ValueError("arguments are nested too deeply") from None
        if size > MAX_DECISION_ARGUMENTS_BYTES:
            raise ValueError(
                f"arguments are {size} bytes of JSON; a decision may carry at most "
                f"{MAX_DECISION_ARGUMENTS_BYTES}"
            )
    return value


class ApproveSignal(SignedDecision):
    """Payload of signal ``approve``: run a call that waits; ``arguments`` replaces the model's.

    ``arguments`` are at most :data:`MAX_DECISION_ARGUMENTS_BYTES` of JSON.
    """

    tool_call_id: str
    principal_id: str = "anonymous"
    arguments: dict[str, Any] | None = None
    comment: str | None = None

    @field_validator("arguments")
    @classmethod
    def _arguments_bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _bounded_arguments(value)


class RejectSignal(SignedDecision):
    """Payload of signal ``reject``: the call is not run; the model is told why."""

    tool_call_id: str
    principal_id: str = "anonymous"
    reason: str = "rejected"


class DecideUpdate(SignedDecision):
    """Payload of update ``decide``: an approval or rejection, answered synchronously.

    ``arguments`` are at most :data:`MAX_DECISION_ARGUMENTS_BYTES` of JSON.
    """

    tool_call_id: str
    decision: Literal["approve", "reject"]
    principal_id: str = "anonymous"
    arguments: dict[str, Any] | None = None
    comment: str | None = None
    reason: str | None = None

    @field_validator("arguments")
    @classmethod
    def _arguments_bounded(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return _bounded_arguments(value)


class DecideResult(BaseModel):
    """Answer of update ``decide``."""

    tool_call_id: str
    decision: Literal["approve", "reject"]
    accepted: bool = True


class InterruptSignal(BaseModel):
    """Payload of signal ``interrupt``."""

    reason: str = "interrupted"
    principal_id: str = "anonymous"


class PrincipalSignal(BaseModel):
    """Payload of signals ``pause`` and ``resume``."""

    principal_id: str = "anonymous"


class MessageSignal(BaseModel):
    """Payload of signal ``send_message``.

    ``client_tools`` (optional): tools the client runs, offered from this message on (a tool of
    the same name sent before is replaced; one named like an agent's own tool is ignored, with
    why, in ``ignored_signals``).
    """

    content: str
    principal_id: str = "anonymous"
    client_tools: list[ClientToolDef] | None = Field(default=None, max_length=64)


class RaiseBudgetSignal(BaseModel):
    """Payload of signal ``raise_budget``: new totals (not increments); ``None`` keeps a limit.

    Each is a finite number above 0: a NaN compared false with every use, so it lifted the limit,
    and a negative or zero one paused the run at once (a signal naming one is ignored with why).
    """

    principal_id: str = "anonymous"
    max_total_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    max_sandbox_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
