"""Code Mode in the run: a script over the agent's tools, stepped by the workflow.

The model calls the spec's Code Mode tool (``code_mode.tool``, default ``run_code``) with a
``script``. :func:`run_script` then alternates:

1. ``code.step`` (activities/code_mode.py): run the script in Monty, inside bubblewrap, until it
   waits on tool calls (one, or all those a ``gather`` started) or ends; the paused interpreter
   comes back as a snapshot;
2. those tool calls, as ordinary calls of this run (``ToolStep.execute``: policy,
   approvals, events, audit, one ``tool.invoke`` each, concurrently), with ids
   ``<script call id>.<n>``;
3. ``code.step`` again with the snapshot and the results.

Everything the script did is in the history (each step's result, each tool call), so a crashed
worker resumes from the last recorded step and replay runs no script. The script's clock and its
``random`` seed come from the workflow. The model receives one tool result, JSON
``{"status": "ok"|"error", "value", "stdout", "truncated", "tool_calls", "steps", "error"}``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    import workflows.turn as turn
    from activities.contracts import (
        CodeStepInput,
        CodeStepOutput,
        HostResult,
        ToolCallRequest,
        ToolInfo,
    )
    from activities.interfaces import code_step
    from workflows.model_choice import tenant_priority
    from workflows.models import ToolCallRecord
    from workflows.run_context import cause_message

if TYPE_CHECKING:
    from activities.spec import PinnedSpec
    from activities.spec_settings import CodeModeSpec
    from workflows.run_context import RunContext


class ScriptHost(Protocol):
    """What a script's host calls (``workflows.tool_calls.ToolStep``, which runs the script).

    A protocol, so that this module needs no import of the tool step that imports it.
    """

    ctx: RunContext

    async def execute(
        self, calls: list[ToolCallRequest]
    ) -> tuple[list[ToolCallRecord], dict[str, str]]:
        """Carry ``calls`` out as ordinary calls of the run: policy, approvals, activities."""
        ...


STDOUT_CAP = 16_000
"""Characters of the script's ``print()`` output the model is given."""
REFUSED = {"denied": "PermissionError", "rejected": "PermissionError", "timed_out": "TimeoutError"}
"""Exception type raised in the script for a tool call that did not run, by its status."""


def script_result(
    out: CodeStepOutput | None, printed: str, calls: int, steps: int, error: str | None
) -> str:
    """The text the model reads for a script (see the module docstring).

    ``printed`` is what every step printed, in order.
    """
    failed = error is not None or out is None or out.status != "done"
    body: dict[str, Any] = {
        "status": "error" if failed else "ok",
        "value": out.value if out is not None and out.status == "done" else None,
        "stdout": printed[:STDOUT_CAP],
        "truncated": len(printed) > STDOUT_CAP or (out is not None and out.truncated),
        "tool_calls": calls,
        "steps": steps,
    }
    if failed:
        body["error"] = error or (out.error if out is not None else None) or "the script failed"
    return json.dumps(body, ensure_ascii=False, default=repr)


def host_results(
    asked: list[Any], subs: list[ToolCallRequest], records: list[Any], outcomes: dict[str, str]
) -> list[HostResult]:
    """What each tool call of a batch answers the script: its text, or an exception."""
    out: list[HostResult] = []
    for ask, sub, rec in zip(asked, subs, records, strict=True):
        text = outcomes.get(sub.id, "")
        if rec.status == "ok":
            out.append(HostResult(call_id=ask.call_id, value=text))
        else:
            exc = REFUSED.get(rec.status, "RuntimeError")
            out.append(HostResult(call_id=ask.call_id, error=text, exc_type=exc))
    return out


def _step_options(info: ToolInfo, step: int, seconds: float) -> dict[str, Any]:
    return {
        "start_to_close_timeout": timedelta(seconds=seconds + 30),
        "retry_policy": RetryPolicy(
            maximum_attempts=info.max_attempts, initial_interval=timedelta(seconds=1)
        ),
        "summary": f"code: {info.name} step {step}",
    }


def _first_input(pinned: PinnedSpec, cm: CodeModeSpec, script: str) -> CodeStepInput:
    """The first ``code.step`` input of ``script`` under ``cm`` (the spec's ``code_mode``).

    Its tools are those of ``cm.tools`` the pinned spec has as plain tools. Reads the workflow's
    clock, then draws the script's ``random`` seed from the workflow's deterministic random.
    """
    tools = {t.name: t for t in pinned.tools}
    allowed = [n for n in cm.tools if n in tools and tools[n].kind == "tool"]
    return CodeStepInput(
        script=script,
        tools=allowed,
        now=workflow.now().isoformat(),
        seed=workflow.random().randint(0, 2**31 - 1),
        step_seconds=cm.step_seconds,
        max_memory_bytes=cm.max_memory_mb * 1024 * 1024,
    )


def _sub_calls(call: ToolCallRequest, calls: int, out: CodeStepOutput) -> list[ToolCallRequest]:
    """The tool calls a step asked for, as calls of this run: ids ``<call.id>.<n>``.

    ``n`` counts on from ``calls`` (the script's calls so far); arguments are JSON, keys sorted.
    """
    return [
        ToolCallRequest(
            id=f"{call.id}.{calls + i + 1}",
            name=c.name,
            arguments=json.dumps(c.arguments, sort_keys=True),
        )
        for i, c in enumerate(out.calls)
    ]


async def run_script(
    host: ScriptHost, call: ToolCallRequest, rec: ToolCallRecord, info: ToolInfo
) -> turn.Settled:
    """Run one Code Mode call to its end; how it ended, and the tool result text.

    Never raises for the script's own errors; ``Stop`` (an interrupt, the deadline) passes through.
    """
    pinned, req = host.ctx.pinned(), host.ctx.req()
    cm = pinned.spec.code_mode
    ran_with = turn.ran_with(rec)
    args = ran_with if isinstance(ran_with, dict) else {}
    script = args.get("script")
    rec.status = "running"
    started = workflow.now()
    host.ctx.tool_started(rec)
    if cm is None or not isinstance(script, str) or not script.strip():
        text = script_result(
            None, "", 0, 0, "give the script as a non-empty string argument 'script'"
        )
        return _finish(text, False, started)
    inp = _first_input(pinned, cm, script)
    calls = steps = 0
    printed = ""
    out: CodeStepOutput | None = None
    error: str | None = None
    while True:
        steps += 1
        opts = _step_options(info, steps, cm.step_seconds)
        opts["priority"] = tenant_priority(req.tenant_id)
        try:
            out = await workflow.execute_activity(code_step, inp, **opts)
        except ActivityError as e:
            error = f"the script could not run: {cause_message(e)}"
            break
        printed += out.stdout
        if out.status != "calls":
            break
        if calls + len(out.calls) > cm.max_calls:
            error = f"the script asked for more than {cm.max_calls} tool calls"
            break
        subs = _sub_calls(call, calls, out)
        calls += len(subs)
        records, outcomes = await host.execute(subs)
        inp = inp.model_copy(
            update={
                "script": "",
                "snapshot": out.snapshot,
                "results": host_results(out.calls, subs, records, outcomes),
            }
        )
    text = script_result(out, printed, calls, steps, error)
    ok = error is None and out is not None and out.status == "done"
    return _finish(text, ok, started)


def _finish(text: str, ok: bool, started: Any) -> turn.Settled:
    """How the script's call ended; the tool step records it (``ToolStep.settle``)."""
    duration = (workflow.now() - started).total_seconds() * 1000
    return turn.Settled("ok" if ok else "error", text, duration_ms=duration, result_chars=len(text))
