"""Cases from real runs: a run's history turned into an evaluation case (``agentctl eval capture``).

One case per run: its input, every tool call the model asked for with what it was told
(:class:`~activities.evals.contracts.Recording`), its answer (as ``expected``, or as the judge's
reference in ``metadata.reference``), its agent and spec hash. ``agentctl eval run
--replay-tools`` answers the case's tool calls from the recording (docs/evaluations.md).
"""

from __future__ import annotations

from typing import Any, Literal

from temporalio.client import Client
from temporalio.converter import DataConverter

from activities.evals.contracts import Case, RecordedCall, Recording
from workers.history._audit import audit
from workers.history._entries import Audit, ToolCallEntry
from workers.history._fetch import Histories, as_chain, fetch_chain
from workers.history._fork import fork_points
from workers.history._payloads import DEFAULT_CONVERTER, inline_payloads

Answer = Literal["expected", "reference", "none"]


class CaptureError(ValueError):
    """The run cannot become a case (it has not finished, or its history cannot be read)."""


def told(histories: Histories, data_converter: DataConverter = DEFAULT_CONVERTER) -> dict[str, str]:
    """Tool call id -> the ``tool`` message the model was given, from every model step's input.

    Covers calls that are no ``tool.invoke`` of their own (denied, rejected, ``ask_*`` children,
    answered from a recording); the results of calls a step ran first are filled in
    (:func:`workers.history.fork_points`).
    """
    out: dict[str, str] = {}
    for messages in fork_points(histories, data_converter).values():
        for m in messages:
            if m.get("role") == "tool" and isinstance(m.get("content"), str) and m["content"]:
                out.setdefault(str(m.get("tool_call_id")), m["content"])
    return out


def recorded_call(entry: ToolCallEntry, told_text: str | None) -> RecordedCall:
    """One audited tool call as a case records it (the model's arguments, the ones it ran with)."""
    asked = entry.requested_arguments if entry.requested_arguments is not None else entry.arguments
    ran_with = entry.arguments if entry.ran and isinstance(entry.arguments, dict) else None
    call = RecordedCall(
        id=entry.tool_call_id,
        name=entry.name,
        arguments=asked,
        run_arguments=ran_with if ran_with != asked else None,
        status=entry.status,
        turn=entry.turn,
    )
    if call.answered:
        call.result = entry.result if entry.result is not None else (told_text or "")
    return call


def case_of(
    trail: Audit,
    told_texts: dict[str, str],
    *,
    answer: Answer = "expected",
    unmatched: Literal["error", "live"] = "error",
) -> Case:
    """The case of one audited run (see the module's docstring).

    ``metadata`` holds ``captured_from`` (the run id), ``agent``, ``spec_hash``, ``model`` (of
    the first model step), ``status`` and ``trajectory`` (the tool names, in order);
    ``reference`` the answer when ``answer`` is ``reference``.

    Raises:
        CaptureError: the run has no result yet (it is running, or did not return one).
    """
    res = trail.result
    if res is None:
        raise CaptureError(f"run {trail.workflow_id} has no result ({trail.status}): not captured")
    steps = trail.model_steps
    model = steps[0].model if steps else None
    calls = [recorded_call(e, told_texts.get(e.tool_call_id)) for e in trail.tool_calls]
    metadata: dict[str, Any] = {
        "captured_from": trail.workflow_id,
        "agent": trail.agent,
        "spec_hash": res.spec_hash,
        "model": model,
        "status": res.status,
        "trajectory": [c.name for c in calls],
    }
    if answer == "reference" and res.output is not None:
        metadata["reference"] = res.output
    return Case(
        id=trail.workflow_id[:200],
        input=trail.input,
        expected=res.output if answer == "expected" else None,
        metadata=metadata,
        recording=Recording(
            run_id=trail.workflow_id,
            agent=trail.agent,
            spec_hash=res.spec_hash,
            model=model,
            calls=calls,
            unmatched=unmatched,
        ),
    )


def capture(
    histories: Histories,
    *,
    data_converter: DataConverter = DEFAULT_CONVERTER,
    answer: Answer = "expected",
    unmatched: Literal["error", "live"] = "error",
) -> Case:
    """The case of a run from its history (or chain of histories, oldest first).

    Payloads must be inline and readable with ``data_converter`` (see
    :func:`workers.history.inline_payloads`).

    Raises:
        CaptureError: the run has no result yet.
        ValueError: not a run's history.
    """
    chain = as_chain(histories)
    if chain and chain[0].events:
        start = chain[0].events[0].workflow_execution_started_event_attributes.input.payloads
        if any(p.metadata.get("encoding") == b"binary/encrypted" for p in start):
            raise CaptureError(
                f"run {chain[0].workflow_id} is encrypted and this client holds no key that "
                "decrypts it (AGENT_ENCRYPTION_KEYS)"
            )
    return case_of(
        audit(chain, data_converter=data_converter),
        told(chain, data_converter),
        answer=answer,
        unmatched=unmatched,
    )


async def capture_run(
    client: Client,
    run_id: str,
    *,
    answer: Answer = "expected",
    unmatched: Literal["error", "live"] = "error",
) -> Case:
    """Fetch every execution of run ``run_id`` and :func:`capture` it.

    Payloads are read with the client's data converter: an encrypted run needs a client with
    its keys (:func:`workers.client.connect` under ``AGENT_ENCRYPTION_KEYS``).

    Raises:
        CaptureError: the run has no result yet.
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    chain = await inline_payloads(await fetch_chain(client, run_id), client.data_converter)
    return capture(chain, data_converter=client.data_converter, answer=answer, unmatched=unmatched)
