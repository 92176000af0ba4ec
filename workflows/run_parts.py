"""The owned parts of the run state (:class:`workflows.models.RunData`), and their flat wire shape.

Each part is changed by exactly one module, its owner (named in each class docstring), through
small methods that the other modules call; anyone may read a part. On the wire (``RunRequest.carry``
in histories) a part does not show: its fields sit flat in the carry JSON, under the names stored
histories use (:func:`nest` reads them back in, :func:`flatten` writes them out).
Fields marked ``exclude=True`` belong to one execution and are not carried.

Also the records these parts hold (:class:`PendingApproval`, :class:`Decision`,
:class:`ChildRecord`), re-exported by :mod:`workflows.models` under their public names.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from activities.contracts import StepToolCall, Usage
from activities.guardrail_models import GuardrailTrip
from workflows.client_models import PendingClientTool, ToolResultUpdate
from workflows.signals import ApproveSignal, InterruptSignal, MessageSignal, RejectSignal
from workflows.view_models import ChildRecord, Decision, PendingApproval


class Transcript(BaseModel):
    """The conversation sent to the model, and what is known of its size.

    Owner: :mod:`workflows.transcript`.
    """

    messages: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    compactions: int = 0
    token_counts: list[int] = Field(
        default_factory=list[int], exclude=True, description="exact tokens of messages[:len(...)]"
    )
    tools_tokens: int | None = Field(default=None, exclude=True)
    parse_failures: int = Field(
        default=0, exclude=True, description="model replies in a row whose tool calls did not parse"
    )


class Approvals(BaseModel):
    """Calls waiting for a person's decision, the decisions taken, and decisions held.

    Owner: :mod:`workflows.approvals`.
    """

    decisions: list[Decision] = Field(default_factory=list[Decision])
    pending: dict[str, PendingApproval] = Field(default_factory=dict, exclude=True)
    verdicts: dict[str, Decision] = Field(default_factory=dict, exclude=True)
    unconfirmed: set[str] = Field(
        default_factory=set, exclude=True, description="approval requests made outside a task"
    )
    parked: list[tuple[str, ApproveSignal | RejectSignal, datetime]] = Field(
        default_factory=list[tuple[str, ApproveSignal | RejectSignal, datetime]],
        exclude=True,
        description="decisions held (workflows/approvals.py, Decisions)",
    )


class PersonWaits(BaseModel):
    """The run's waits for people (approvals, client tools, a pause, a chat's next message).

    Their time is not the run's: ``max_seconds`` counts without it. Owner:
    :mod:`workflows.run_context` (``RunContext.wait_for_person``).
    """

    waited_seconds: float = Field(
        default=0.0, description="workflow seconds spent waiting for people"
    )
    waits: int = Field(
        default=0, exclude=True, description="waits for a person entered (revision 3)"
    )


class Budget(BaseModel):
    """What the run used, its limits, and whether it waits for more budget.

    Owner: :mod:`workflows.charges`.
    """

    usage: Usage = Field(default_factory=Usage)
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    max_sandbox_seconds: float | None = None
    sandbox_seconds: float = Field(
        default=0.0, description="seconds sandboxed tools ran (run_python, run_command)"
    )
    model_steps: list[dict[str, Any]] = Field(
        default_factory=list[dict[str, Any]],
        description="RunResult.model_steps: the model of every step",
    )
    budget_paused: bool = Field(default=False, exclude=True)


class Visibility(BaseModel):
    """What listings show of the run: its search attributes.

    Owner: :class:`workflows.run_context.RunContext` (:mod:`workflows.run_context`).
    """

    sa_shown: dict[str, Any] = Field(
        default_factory=dict,
        description="revision 4: search attribute name -> the value listings show (set at start "
        "or upserted); an upsert carries only what differs from it",
    )
    search_attributes: bool = Field(default=False, exclude=True)
    sa_upserted_at: datetime | None = Field(default=None, exclude=True)


class Delegation(BaseModel):
    """Child runs, the calls they wait on, and the agents the run was handed to.

    Owner: :mod:`workflows.children`.
    """

    children: list[ChildRecord] = Field(
        default_factory=list[ChildRecord],
        description="child runs (sub-agents), in the order started",
    )
    lineage: list[str] = Field(default_factory=list, description="agents of the run (handoffs)")
    child_pending: dict[str, list[PendingApproval]] = Field(
        default_factory=dict, exclude=True, description="child run id -> calls it waits on"
    )
    handoff_to: str | None = Field(default=None, exclude=True, description="handoff of this turn")


class HeldCalls(BaseModel):
    """Local tools' calls held for the next model step.

    Owner: :class:`workflows.model_step.ToolsFirst`.
    """

    tools_first: list[StepToolCall] = Field(
        default_factory=list[StepToolCall],
        exclude=True,
        description="calls waiting for the next model step (their tool messages are still empty)",
    )


class ClientCalls(BaseModel):
    """Calls of tools the client runs, waiting for update ``tool_result``.

    Owner: :mod:`workflows.client_tools`.
    """

    client_waiting: dict[str, PendingClientTool] = Field(
        default_factory=dict,
        exclude=True,
        description="client tools' calls waiting for tool_result (workflows/client_tools.py)",
    )
    client_results: dict[str, ToolResultUpdate] = Field(
        default_factory=dict, exclude=True, description="tool_result answers taken, by call id"
    )


class Guards(BaseModel):
    """Guardrails that tripped, and a block waiting for a person.

    Owner: :mod:`workflows.guardrails`.
    """

    guardrails: list[GuardrailTrip] = Field(
        default_factory=list[GuardrailTrip],
        description="guardrails that tripped, in order (details never hold what they found)",
    )
    guardrail_blocked: GuardrailTrip | None = Field(
        default=None, exclude=True, description="a block not acted on yet (workflows/guardrails.py)"
    )
    guardrail_paused: bool = Field(
        default=False, exclude=True, description="paused by a block, for a person"
    )


class Control(BaseModel):
    """What people sent to steer the run: messages not yet taken, a pause, an interrupt.

    Owner: :mod:`workflows.control`.
    """

    inbox: list[MessageSignal] = Field(
        default_factory=list[MessageSignal],
        description="messages sent (send_message, add_message) not yet in the transcript",
    )
    paused: bool = Field(default=False, description="held before its next step (pause signal)")
    interrupt: InterruptSignal | None = Field(
        default=None, exclude=True, description="the interrupt signal, once one came"
    )


RUN_PARTS: dict[str, type[BaseModel]] = {
    "transcript": Transcript,
    "approvals": Approvals,
    "person_waits": PersonWaits,
    "budget": Budget,
    "visibility": Visibility,
    "delegation": Delegation,
    "held": HeldCalls,
    "client_calls": ClientCalls,
    "guards": Guards,
    "control": Control,
}
"""RunData's attribute of each part -> the part's model."""

WIRE_ORDER = (
    "pinned messages turn usage tool_calls memory decisions ignored_signals inbox paused "
    "signatures waited_seconds started_at max_total_tokens max_cost_usd max_sandbox_seconds "
    "sandbox_seconds run_files compactions continued_runs output children lineage plan events "
    "model_steps sa_shown replayed model_arguments guardrails tools_in_step"
).split()
"""The carry JSON's keys, in the order stored histories write them; a field added later (to
RunData or a part) is written after them, in declaration order."""

PART_OF: dict[str, str] = {f: part for part, kind in RUN_PARTS.items() for f in kind.model_fields}
"""Flat field name -> the part holding it."""


def nest(data: Any) -> Any:
    """A flat mapping of RunData fields with each part's fields gathered under the part's name.

    A part given whole (a model or a mapping) is kept, its flat fields given beside it win.
    Anything but a dict (a RunData already) passes as it is.
    """
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    for key, value in data.items():  # pyright: ignore[reportUnknownVariableType]
        part = PART_OF.get(key) if isinstance(key, str) else None
        if part is None:
            out[key] = value
        else:
            parts.setdefault(part, {})[key] = value
    for part, flat in parts.items():
        given = out.get(part)
        if isinstance(given, BaseModel):
            given = dict(given)
        out[part] = {**given, **flat} if isinstance(given, dict) else flat
    return out


def flatten(nested: dict[str, Any]) -> dict[str, Any]:
    """``nest`` undone: each part's dumped fields back at the top level, in :data:`WIRE_ORDER`."""
    flat = dict(nested)
    for part in RUN_PARTS:
        inner = flat.pop(part, None)
        if isinstance(inner, dict):
            flat.update(inner)  # pyright: ignore[reportUnknownArgumentType]
    ordered = {k: flat.pop(k) for k in WIRE_ORDER if k in flat}
    return {**ordered, **flat}
