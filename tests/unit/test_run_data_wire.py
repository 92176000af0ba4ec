"""The carry JSON of ``RunData`` keeps its flat wire shape (issue #36 item 4).

Stored histories and runs in flight carry ``RunRequest.carry`` as one flat JSON object whose
keys are the names below, in this order; the run state's owned parts must not show on the wire.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter
from pydantic_core import to_json
from temporalio.contrib.pydantic import pydantic_data_converter

from workers.history import load_history_file
from workflows.models import PendingApproval, RunData, RunRequest
from workflows.run_parts import RUN_PARTS

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
T0 = datetime(2026, 11, 28, tzinfo=UTC)

WIRE = [
    "pinned",
    "messages",
    "turn",
    "usage",
    "tool_calls",
    "memory",
    "decisions",
    "ignored_signals",
    "inbox",
    "paused",
    "signatures",
    "waited_seconds",
    "started_at",
    "max_total_tokens",
    "max_cost_usd",
    "max_sandbox_seconds",
    "sandbox_seconds",
    "run_files",
    "compactions",
    "continued_runs",
    "output",
    "children",
    "lineage",
    "plan",
    "events",
    "model_steps",
    "sa_shown",
    "replayed",
    "model_arguments",
    "guardrails",
    "tools_in_step",
]
"""The carry's keys, in order, as every stored history since revision 1 writes them."""


def _carries() -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for path in sorted(HISTORIES.rglob("continue_as_new*.json")):
        for event in load_history_file(path).events:
            for attrs in (
                event.workflow_execution_started_event_attributes,
                event.workflow_execution_continued_as_new_event_attributes,
            ):
                payloads = attrs.input.payloads
                if payloads and b'"carry":{' in payloads[0].data:
                    out.append((str(path.relative_to(HISTORIES)), payloads[0].data))
    return out


CARRIES = _carries()


def _wire_types() -> dict[str, TypeAdapter[Any]]:
    """Each wire key's declared type, read from the flat JSON schema's owner fields."""
    fields = dict(RunData.model_fields)
    for part in RUN_PARTS.values():
        fields.update(part.model_fields)
    return {k: TypeAdapter[Any](fields[k].annotation or Any) for k in WIRE}


def test_every_stored_continue_as_new_history_is_read():
    assert len(CARRIES) >= 10


@pytest.mark.parametrize(("name", "data"), CARRIES, ids=[n for n, _ in CARRIES])
def test_a_stored_carry_goes_back_out_as_the_same_flat_json(name: str, data: bytes):
    sent = json.loads(data)["carry"]
    req = RunRequest.model_validate_json(data)
    assert req.carry is not None
    out = json.loads(to_json(req.carry))
    assert list(out) == WIRE, name
    for key in WIRE:
        if key in sent:  # each value as its own type writes it (nested models gained fields)
            kind = _wire_types()[key]
            assert out[key] == kind.dump_python(kind.validate_python(sent[key]), mode="json"), key
        else:  # written after that history was recorded: its default
            assert out[key] == json.loads(to_json(RunData.model_validate({"started_at": T0})))[key]
    # the converter the worker uses writes the same object, nested in the request
    payload = pydantic_data_converter.payload_converter.to_payloads([req])[0]
    assert json.loads(payload.data)["carry"] == out
    # and a carry read back is the same run state
    assert RunData.model_validate_json(to_json(req.carry)) == req.carry


def test_one_execution_fields_stay_off_the_wire_and_come_back_empty():
    p = PendingApproval(tool_call_id="c1", name="x", arguments={}, requested_at="t", turn=1)
    d = RunData.model_validate(
        {
            "started_at": T0,
            "pending": {"c1": p},
            "token_counts": [1, 2],
            "tools_first": [],
            "budget_paused": True,
            "search_attributes": True,
            "handoff_to": "other",
            "guardrail_paused": True,
            "client_waiting": {},
            "messages": [{"role": "user", "content": "hi"}],
            "sa_shown": {"AgentStatus": "running"},
        }
    )
    out: dict[str, Any] = json.loads(to_json(d))
    assert list(out) == WIRE
    assert out["messages"] == [{"role": "user", "content": "hi"}]
    assert out["sa_shown"] == {"AgentStatus": "running"}
    # flat keys went into their parts
    assert d.approvals.pending == {"c1": p} and d.transcript.token_counts == [1, 2]
    assert d.budget.budget_paused and d.visibility.search_attributes
    assert d.delegation.handoff_to == "other" and d.guards.guardrail_paused
    back = RunData.model_validate_json(to_json(d))
    assert back.model_dump() == d.model_dump()
    assert back.transcript.messages == d.transcript.messages
    assert back.visibility.sa_shown == {"AgentStatus": "running"}
    # the one-execution fields did not travel
    assert back.approvals.pending == {} and back.transcript.token_counts == []
    assert not back.budget.budget_paused and not back.visibility.search_attributes
    assert back.delegation.handoff_to is None and not back.guards.guardrail_paused


def test_a_part_given_whole_takes_its_flat_fields_beside_it():
    d = RunData.model_validate(
        {"started_at": T0, "budget": {"max_cost_usd": 2.0}, "max_total_tokens": 100}
    )
    assert d.budget.max_cost_usd == 2.0 and d.budget.max_total_tokens == 100
    assert d.get_flat("max_total_tokens") == 100 and d.get_flat("turn") == 0
