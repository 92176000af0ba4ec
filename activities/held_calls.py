"""Held calls: the local tools' calls a model step runs before it asks the model.

``model.complete`` runs a step's ``tools_first`` calls (``CallModelInput.tools_first``, held by
``ToolsFirst`` in workflows/model_step.py) through :func:`run`, given by the worker
(``RuntimeActivities.run_first``, workers/worker.py). Each call runs as its own ``tool.invoke``
would (``RuntimeActivities._checked``), with that activity's timeout and attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractContextManager
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, wait_fixed

from activities import metrics
from activities.contracts import InvokeToolInput, StepToolCall, ToolOutcome
from activities.redaction import redacting
from activities.rules import failure_text

__all__ = ["run"]

Checked = Callable[[InvokeToolInput], Awaitable[ToolOutcome]]
"""Runs one attempt of a call, as ``tool.invoke`` does (``RuntimeActivities._checked``)."""
Bind = Callable[[InvokeToolInput], Any]
"""The worker's logger bound to one call (``activities.runtime._bound_log``)."""


async def run(calls: list[StepToolCall], checked: Checked, bind: Bind) -> list[ToolOutcome]:
    """Run a model step's held calls concurrently; one outcome per call, in order.

    Each call gets ``timeout_seconds`` per attempt and ``max_attempts`` attempts, 1 s apart
    (what its own ``tool.invoke`` activity would get from Temporal). These retries are not
    Temporal's because a retry of the step's activity would ask the model again too; after a
    failed first attempt they are tenacity's. Business errors come back as ``status="error"``, as
    from ``tool.invoke``; a call that fails on every attempt comes back with ``failure`` (and
    ``timed_out``) set.

    Raises:
        asyncio.CancelledError: the step was cancelled (interrupt, deadline); the calls are too.
    """
    return list(await asyncio.gather(*(_run_with_attempts(c, checked, bind) for c in calls)))


async def _run_with_attempts(first: StepToolCall, checked: Checked, bind: Bind) -> ToolOutcome:
    # the spec's secrets are the call's, not the step's: redact them here (output, errors)
    with _tool_span(first.call), redacting(first.call.secrets) as r:
        out = await _attempts(first, checked, bind)
        if out.failure is not None:
            out.failure, out.content = r.redact(out.failure), r.redact(out.content)
        return out


async def _attempts(first: StepToolCall, checked: Checked, bind: Bind) -> ToolOutcome:
    req, bound = first.call, bind(first.call)
    attempts, limit = max(1, first.max_attempts), first.timeout_seconds
    started = time.perf_counter()

    async def attempt() -> ToolOutcome:
        return await asyncio.wait_for(checked(req), limit)

    try:  # the first attempt alone: most calls need no retry controller (#36, worker CPU)
        outcome = await attempt()
    except Exception as exc:  # noqa: BLE001 - retried (tenacity), then given to the workflow
        return await _retried(req, bound, attempt, exc, attempts, limit, started)
    return _succeeded(req, bound, outcome)


async def _retried(
    req: InvokeToolInput,
    bound: Any,
    attempt: Callable[[], Coroutine[Any, Any, ToolOutcome]],
    first_error: Exception,
    attempts: int,
    limit: float,
    started: float,
) -> ToolOutcome:
    """After a held call's failed first attempt: the other attempts, 1 s apart (tenacity).

    Tenacity's attempt 1 is the first attempt's failure (``first_error``), so its ``after``
    hook logs every failed attempt and its ``stop`` counts them all.
    """
    pending: list[Exception] = [first_error]

    async def again() -> ToolOutcome:
        if pending:
            raise pending.pop()
        return await attempt()

    def failed(state: RetryCallState) -> None:  # after each failed attempt (tenacity)
        bound.warning(
            "tool_infrastructure_error",
            attempt=state.attempt_number,
            elapsed_ms=round((time.perf_counter() - started) * 1000, 2),  # since the first
            error=_failure(state.outcome.exception() if state.outcome else None, limit)[0],
        )  # the error is redacted by the logging chain (activities/redaction.py)

    retrying = AsyncRetrying(
        stop=stop_after_attempt(attempts), wait=wait_fixed(1.0), after=failed, reraise=True
    )
    try:
        outcome: ToolOutcome = await retrying(again)
    except Exception as exc:  # noqa: BLE001 - given to the workflow after the last attempt
        failure, timed_out = _failure(exc, limit)
        metrics.tool_call(req.name, "timed_out" if timed_out else "infrastructure_error")
        return ToolOutcome(
            call_id=req.call_id,
            name=req.name,
            status="error",
            content=failure_text(timed_out, False, failure, attempts)[1],
            failure=failure,
            timed_out=timed_out,
        )
    return _succeeded(req, bound, outcome)


def _succeeded(req: InvokeToolInput, bound: Any, outcome: ToolOutcome) -> ToolOutcome:
    """Log and count a held call's outcome (an attempt that ran to the end), and return it."""
    bound.info("tool_call", status=outcome.status, duration_ms=outcome.duration_ms,
               output_chars=outcome.output_chars, in_model_step=True)  # fmt: skip
    metrics.tool_call(req.name, outcome.status, outcome.duration_ms)
    return outcome


def _failure(exc: BaseException | None, timeout_seconds: float) -> tuple[str, bool]:
    """What an attempt's exception says, and whether it was the attempt's timeout."""
    if isinstance(exc, TimeoutError):
        return f"timed out after {timeout_seconds:g} s", True
    return f"{type(exc).__name__}: {exc}", False


def _tool_span(req: InvokeToolInput) -> AbstractContextManager[Any]:
    """A ``RunTool:<tool>`` OpenTelemetry span for a call run inside a model step, when traced.

    A child of the step's ``RunActivity:model.complete`` span, with the run's
    ``temporalWorkflowID``, ``tool`` and ``toolCallID`` attributes. Only when the step itself is
    traced (``AGENT_OTEL`` on, workers/telemetry.py); otherwise nothing is imported or made.
    """
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return contextlib.nullcontext()  # not traced: no span, no made-up trace
    attributes = {"temporalWorkflowID": req.run_id, "tool": req.name, "toolCallID": req.call_id}
    return trace.get_tracer("agent-runtime").start_as_current_span(
        f"RunTool:{req.name}", attributes=attributes
    )
