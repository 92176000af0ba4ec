"""Fork a run: a new run seeded with the transcript the model saw at one step; and its lineage."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.converter import DataConverter

from activities.contracts import MODEL_COMPLETE, fill_tool_messages
from workers.history._fetch import Histories, as_chain, fetch_chain, start_attributes
from workers.history._payloads import DEFAULT_CONVERTER, as_dict, first_object, inline_payloads
from workflows.models import RunRequest, RunResult


class ForkError(ValueError):
    """The run cannot be forked as asked (no model step, or the turn is out of range)."""


def fork_points(
    histories: Histories, data_converter: DataConverter = DEFAULT_CONVERTER
) -> dict[int, list[dict[str, Any]]]:
    """The messages the model saw at each model step: ``{turn: messages}`` (turns are 1-based).

    Read from the ``CallModelInput`` of each ``model.complete`` ActivityTaskScheduled event (the
    first of a turn, unless that step did not ask the model, ``ModelReply.model_skipped``: then
    the next step of the turn, after compaction); payloads must be
    inline (see :func:`inline_payloads`). The results of the tool calls a step ran first
    (``CallModelInput.tools_first``: their ``tool`` messages are empty in the input) are filled in
    from the step's ``ModelReply.tool_outcomes``. Turns whose input cannot be read are left out.
    """
    points: dict[int, list[dict[str, Any]]] = {}
    skipped: set[int] = set()  # turns whose point is a step that did not ask the model
    for h in as_chain(histories):
        results = _step_results(h.events, data_converter)
        for ev in h.events:
            if ev.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                continue
            a = ev.activity_task_scheduled_event_attributes
            if a.activity_type.name != MODEL_COMPLETE:
                continue
            inp = first_object(data_converter, a.input)
            turn = inp.get("turn")
            if isinstance(turn, int) and (turn not in points or turn in skipped):
                reply = results.get(ev.event_id, {})
                messages = list(inp.get("messages") or [])
                if inp.get("tools_first"):
                    messages = _filled(messages, reply)
                points[turn] = messages
                if reply.get("model_skipped"):
                    skipped.add(turn)
                else:
                    skipped.discard(turn)
    return points


def _step_results(events: Any, data_converter: DataConverter) -> dict[int, dict[str, Any]]:
    """The result of each completed activity, by its scheduled event id."""
    out: dict[int, dict[str, Any]] = {}
    for ev in events:
        if ev.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            a = ev.activity_task_completed_event_attributes
            out[a.scheduled_event_id] = first_object(data_converter, a.result)
    return out


def _filled(messages: list[dict[str, Any]], reply: dict[str, Any]) -> list[dict[str, Any]]:
    """``messages`` with the empty ``tool`` messages of ``reply``'s ``tool_outcomes`` filled."""
    texts = {
        str(o.get("call_id")): str(o.get("content", ""))
        for o in (as_dict(x) for x in reply.get("tool_outcomes") or [])
    }
    return fill_tool_messages(messages, texts)


def edit_seed(messages: list[dict[str, Any]], message: str) -> list[dict[str, Any]]:
    """A copy of ``messages`` whose last user message is ``message`` (appended if it ends otherwise)."""
    seed = copy.deepcopy(messages)
    if seed and seed[-1].get("role") == "user":
        seed[-1]["content"] = message
    else:
        seed.append({"role": "user", "content": message})
    return seed


def _seed_at(points: dict[int, list[dict[str, Any]]], run_id: str, turn: int) -> list[Any]:
    if not points:
        raise ForkError(f"run {run_id} has no model step yet: nothing to fork from")
    if turn not in points:
        lo, last = min(points), max(points)
        raise ForkError(
            f"turn {turn} is out of range: run {run_id} has model steps {lo}..{last};"
            f" choose a turn between {lo} and {last}"
        )
    return copy.deepcopy(points[turn])


def _original_request(first: dict[str, Any], run_id: str) -> RunRequest:
    try:
        return RunRequest.model_validate({k: v for k, v in first.items() if k != "carry"})
    except ValidationError as e:
        raise ForkError(f"run {run_id}'s request cannot be read: {e}") from None


async def fork(
    client: Client,
    run_id: str,
    turn: int,
    *,
    message: str | None = None,
    model: str | None = None,
    task_queue: str | None = None,
    workflow_id: str | None = None,
) -> WorkflowHandle[Any, RunResult]:
    """Start a NEW run that takes over run ``run_id`` just before its model step ``turn``.

    The seed is exactly the messages the model saw at step ``turn`` (1-based), read from the
    history (``CallModelInput.messages`` of that step), so nothing from step ``turn`` on is
    replayed: the fork's first model step is the original's step ``turn`` asked again. Steps
    are numbered over the whole continue-as-new chain; the fork numbers its own steps from 1.

    The new ``RunRequest`` copies the original's agent, input, tenant, principal, mode, limits
    and spec file, and sets ``seed_messages``, ``parent_run_id=run_id`` and ``fork_turn=turn``
    (the run upserts its parent search attribute when the namespace has it). The agent
    spec is resolved again when the fork starts (today's tools and policy).

    Args:
        client: a connected client; its data converter reads the history.
        run_id: the run to fork (any state: running or finished).
        turn: the model step to fork at, ``1 <= turn <= N`` where N is the run's last model step.
        message: edits the seed: when the seed ends with a user message (always at turn 1, or
            when a person had just sent one) its content is replaced by ``message``; otherwise
            (the seed ends with tool results) ``message`` is appended as a new user message.
        model: another model for the fork (``RunRequest.model``); default: the original's override.
        task_queue: default: the original run's task queue.
        workflow_id: default ``run-<uuid4>``.

    Returns:
        The new run's handle (its ``id`` is the new run id).

    Raises:
        ForkError: the run has no model step, or ``turn`` is outside ``1..N`` (the message names
            the range).
        temporalio.service.RPCError: ``NOT_FOUND`` when there is no such run.
    """
    from workers.client import start_run

    conv = client.data_converter
    chain = await inline_payloads(await fetch_chain(client, run_id), conv)
    seed = _seed_at(fork_points(chain, conv), run_id, turn)
    orig = _original_request(first_object(conv, start_attributes(chain[0]).input), run_id)
    if message is not None:
        seed = edit_seed(seed, message)
    req = orig.model_copy(
        update={
            "seed_messages": seed,
            "parent_run_id": run_id,
            "fork_turn": turn,
            "model": model if model is not None else orig.model,
            "carry": None,
        }
    )
    queue = task_queue or start_attributes(chain[-1]).task_queue.name or None
    return await start_run(client, req, task_queue=queue, workflow_id=workflow_id)


async def lineage(
    client: Client, run_id: str, *, max_depth: int = 20
) -> list[tuple[str, int | None]]:
    """``[(run_id, fork_turn), (parent, its fork_turn), ...]`` up to the first run (not a fork).

    Each step reads the first event of the run's latest execution (its ``RunRequest``, decoded
    with the client's data converter). ``fork_turn`` is None for the root. Stops at
    ``max_depth`` or at a run that cannot be read.
    """
    out: list[tuple[str, int | None]] = []
    current: str | None = run_id
    while current and len(out) < max_depth:
        req: dict[str, Any] = {}
        try:
            async for ev in client.get_workflow_handle(current).fetch_history_events(page_size=1):
                attrs = ev.workflow_execution_started_event_attributes
                values = await client.data_converter.decode_wrapper(attrs.input)
                req = as_dict(values[0] if values else None)
                break
        except Exception:  # noqa: BLE001 - a deleted ancestor ends the walk
            out.append((current, None))
            break
        out.append((current, req.get("fork_turn")))
        current = req.get("parent_run_id")
    return out
