"""Every activity the run schedules: its input and its options, built in one place from the pinned spec.

Each builder returns ``(input, options)`` for ``workflow.execute_activity`` with the activity's
declaration in :mod:`activities.interfaces` (stable names ``spec.resolve``, ``model.complete``,
``tool.invoke``, ``tokens.count``; the result type comes from the declaration). One name per
activity: the builder here, the declaration and the worker's implementation are all called
``spec_resolve``, ``model_complete``, ``tool_invoke`` or ``tokens_count``. :func:`execute_local`
runs ``spec.resolve`` or a local tool's ``tool.invoke`` as a local activity. Timeouts are
seconds of the spec; heartbeat timeouts let a dead worker cost seconds, not minutes
(docs/temporal-facts.md). Every activity carries the run's tenant as its fairness key
(:func:`workflows.model_choice.tenant_priority`); a rate-limited model's steps go to that model's
own task queue (:func:`activities.contracts.model_task_queue`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, FailureError

import workflows.render as render
from activities.contracts import (
    CallModelInput,
    CountTokensInput,
    InvokeToolInput,
    MemoryRequest,
    MemoryScopeRef,
    ModelSettings,
    ResolveSpecInput,
    ToolCallRequest,
    ToolInfo,
    model_task_queue,
)
from activities.guardrail_models import GuardrailCheckInput, GuardrailStage, StageGuardrails
from activities.judge import JudgeInput
from activities.spec import JudgeSettings, PinnedSpec
from workflows.model_choice import tenant_priority
from workflows.models import RunRequest
from workflows.policy import parse_arguments

MODEL_HEARTBEAT = timedelta(seconds=5)
TOOL_HEARTBEAT = timedelta(seconds=5)
SUMMARY_SETTINGS = ModelSettings(temperature=0.0, max_tokens=400)
"""Sampling of the compaction summary step."""
_SUMMARY_NOTE = "(summary of dropped context)"
"""The note of the compaction summary step's activity summary in the Web UI."""


def spec_resolve(
    req: RunRequest, workflow_rev: int
) -> tuple[ResolveSpecInput, workflow.ActivityConfig]:
    """Input and options of ``spec.resolve``: 30 s per attempt, 3 attempts.

    ``workflow_rev`` is echoed into the pinned spec, so the run's history records it.
    """
    inp = ResolveSpecInput(
        agent=req.agent,
        spec_file=req.spec_file,
        workflow_rev=workflow_rev,
        tools=req.tools,
        client_tools=req.client_tools or None,
        model=req.model,
    )
    return inp, {
        "start_to_close_timeout": timedelta(seconds=30),
        "retry_policy": RetryPolicy(maximum_attempts=3),
        "summary": f"spec: resolve agent {req.agent}",
        "priority": tenant_priority(req.tenant_id),
    }


def memory_scopes(kinds: list[str], spec: Any, req: RunRequest) -> list[MemoryScopeRef]:
    """The namespaces of ``kinds`` for this run: the tenant is the run's, always."""
    ids = {
        "user": req.principal_id,
        "agent": req.agent,
        "thread": workflow.info().workflow_id,
    }
    return [MemoryScopeRef(tenant_id=req.tenant_id, scope=f"{k}:{ids[k]}") for k in kinds]


def memory_request(spec: Any, req: RunRequest) -> MemoryRequest | None:
    """What a model step reads from memory (None when the spec reads none: no cost at all)."""
    if spec.memory is None or not spec.memory.read:
        return None
    return MemoryRequest(
        namespaces=memory_scopes(spec.memory.read, spec, req),
        max_tokens=spec.memory.max_tokens,
        limit=spec.memory.limit,
    )


SUMMARY_ATTEMPTS = 3
"""Attempts of the compaction summary step the model server may fail."""


def _model_retry() -> RetryPolicy:
    """A model step's retry policy: backoff 1 s doubling up to 30 s, no maximum of its own.

    The step's limit is counted by the activity over the model's own failures
    (``CallModelInput.max_attempts``, activities/model_attempts.py), so attempts lost with a
    worker do not use it up; the run's deadline bounds the step (its schedule-to-close).
    """
    return RetryPolicy(
        initial_interval=timedelta(seconds=1),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=0,
    )


def model_complete(
    pinned: PinnedSpec,
    req: RunRequest,
    turn: int,
    messages: list[dict[str, Any]],
    *,
    summary_of: int | None = None,
    model: str | None = None,
    stream: bool = True,
) -> tuple[CallModelInput, workflow.ActivityConfig]:
    """Input and options of one ``model.complete`` step on ``model`` (default: the spec's primary).

    A model named in the spec's ``rate_limits`` runs on its own queue,
    ``<the run's task queue>.model.<model>``, whose workers hold the limit.

    ``summary_of`` is set for the compaction summary step (that many dropped messages): no tools,
    :data:`SUMMARY_SETTINGS`, :data:`SUMMARY_ATTEMPTS` failures of the model; otherwise the spec's
    sampling, tools and ``model_max_attempts``. Either way attempts lost with a worker are not
    counted (:func:`_model_retry`). ``stream``: whether the activity streams the reply
    (``CallModelInput.stream``).
    """
    spec = pinned.spec
    name = model or spec.model
    checked = stage_guardrails(pinned, "output") if summary_of is None else None
    inp = CallModelInput(
        run_id=workflow.info().workflow_id,
        turn=turn,
        model=name,
        messages=messages,
        tools=[t.openai_schema() for t in pinned.tools] if summary_of is None else [],
        settings=ModelSettings(
            temperature=spec.temperature,
            max_tokens=spec.max_output_tokens,
            retry_temperature_step=spec.retry_temperature_step,
        )
        if summary_of is None
        else SUMMARY_SETTINGS,
        prompt_price_per_mtok=spec.pricing.prompt_per_mtok,
        completion_price_per_mtok=spec.pricing.completion_per_mtok,
        cached_prompt_price_per_mtok=spec.pricing.cached_prompt_per_mtok,
        tenant_id=req.tenant_id,
        stream=stream and checked is None,  # checked text is sent whole, once checked
        memory=memory_request(spec, req) if summary_of is None else None,
        max_attempts=spec.model_max_attempts if summary_of is None else SUMMARY_ATTEMPTS,
        context_window=spec.compaction.context_window,
        guardrails=checked,
    )
    options: workflow.ActivityConfig = {
        "start_to_close_timeout": timedelta(seconds=spec.model_timeout_seconds),
        "heartbeat_timeout": MODEL_HEARTBEAT,
        "retry_policy": _model_retry(),
        "summary": render.model_summary(name, turn, "" if summary_of is None else _SUMMARY_NOTE),
        "priority": tenant_priority(req.tenant_id),
    }
    if name in spec.rate_limits:
        options["task_queue"] = model_task_queue(workflow.info().task_queue, name)
    return inp, options


def as_local(opts: workflow.ActivityConfig) -> workflow.LocalActivityConfig:
    """Local-activity options from :func:`tool_invoke`'s or :func:`spec_resolve`'s options.

    A local activity has no heartbeat, queue or priority of its own (it runs on the workflow's
    worker within the workflow task); its timeouts and retry policy are kept, and retries past
    ``local_retry_threshold`` (1 s) are scheduled with a timer by the SDK.
    """
    out: workflow.LocalActivityConfig = {"local_retry_threshold": timedelta(seconds=1)}
    if "start_to_close_timeout" in opts:
        out["start_to_close_timeout"] = opts["start_to_close_timeout"]
    if "schedule_to_close_timeout" in opts:
        out["schedule_to_close_timeout"] = opts["schedule_to_close_timeout"]
    if "retry_policy" in opts:
        out["retry_policy"] = opts["retry_policy"]
    if "summary" in opts:
        out["summary"] = opts["summary"]
    return out


async def execute_local(activity: Any, arg: Any, opts: workflow.ActivityConfig) -> Any:
    """``workflow.execute_local_activity(activity, arg, **as_local(opts))``; returns its result.

    A local activity's failure can reach the workflow unwrapped (the ``ApplicationError`` the
    activity raised, seen with ``spec.resolve`` under temporalio 1.35), where an activity's always
    arrives as an ``ActivityError`` whose ``cause`` is that error. ``AgentRun`` reads ``e.cause`` of
    an ``ActivityError`` (invalid spec, MCP server unavailable, a tool that timed out), so the
    first form is wrapped into the second.

    Raises:
        ActivityError: the local activity failed (its ``cause`` is the activity's own error).
    """
    try:
        return await workflow.execute_local_activity(activity, arg, **as_local(opts))
    except ActivityError:
        raise
    except FailureError as e:
        name = getattr(activity, "__temporal_activity_definition", None)
        wrapped = ActivityError(
            str(e),
            scheduled_event_id=0,
            started_event_id=0,
            identity="",
            activity_type=getattr(name, "name", None) or str(activity),
            activity_id="",
            retry_state=None,
        )
        raise wrapped from e


def tool_invoke(
    pinned: PinnedSpec,
    req: RunRequest,
    turn: int,
    call: ToolCallRequest,
    arguments: str | dict[str, Any],
    info: ToolInfo | None,
    run_files: dict[str, str] | None = None,
) -> tuple[InvokeToolInput, workflow.ActivityConfig]:
    """Input and options of ``tool.invoke`` for one call (on the tool's own queue when it has one).

    ``arguments`` are the model's JSON text or the dict a person approved. A tool unknown to the
    pinned spec gets 30 s and one attempt (the activity reports it to the model). A sandboxed
    tool gets ``run_files`` (what earlier sandboxed calls wrote, in the payload store).
    """
    spec = pinned.spec
    inp = InvokeToolInput(
        run_id=workflow.info().workflow_id,
        turn=turn,
        call_id=call.id,
        name=call.name,
        arguments=arguments,
        workspace=spec.workspace,
        max_output_chars=spec.max_tool_output_chars,
        tenant_id=req.tenant_id,
        principal_id=req.principal_id,
        secrets=spec.secrets,
        mcp=info.mcp if info else None,
        run_files=dict(run_files or {}) if info is not None and info.sandboxed else {},
        guardrails=stage_guardrails(pinned, "tool_results"),
    )
    shown = arguments if isinstance(arguments, dict) else parse_arguments(arguments) or arguments
    options: workflow.ActivityConfig = {
        "start_to_close_timeout": timedelta(seconds=info.timeout_seconds if info else 30.0),
        "heartbeat_timeout": TOOL_HEARTBEAT,
        "retry_policy": RetryPolicy(
            maximum_attempts=tool_attempts(info), initial_interval=timedelta(seconds=1)
        ),
        "summary": render.tool_summary(call.name, shown),
        "priority": tenant_priority(req.tenant_id),
    }
    if info is not None and info.task_queue:
        options["task_queue"] = info.task_queue
    if info is not None and info.callback:  # finished by an outside system: it cannot heartbeat
        del options["heartbeat_timeout"]
    return inp, options


def stage_guardrails(pinned: PinnedSpec, stage: GuardrailStage) -> StageGuardrails | None:
    """The spec's guardrails of ``stage`` as an activity checks with them; None: none (no cost).

    Only a spec pinned by revision 6 or later can have any (``Versions.guardrails``).
    """
    spec = pinned.spec
    entries = spec.guardrails.stage(stage) if spec.guardrails is not None else []
    if not entries:
        return None
    return StageGuardrails(stage=stage, entries=entries, secrets=list(spec.secrets))


def guardrail_check(
    pinned: PinnedSpec, req: RunRequest, turn: int, text: str, guards: StageGuardrails
) -> tuple[GuardrailCheckInput, workflow.ActivityConfig]:
    """Input and options of ``guardrail.check`` (a local activity): 30 s per attempt, 3 attempts."""
    inp = GuardrailCheckInput(
        run_id=workflow.info().workflow_id,
        turn=turn,
        tenant_id=req.tenant_id,
        text=text,
        guardrails=guards,
    )
    names = ", ".join(e.name for e in guards.entries)
    return inp, {
        "start_to_close_timeout": timedelta(seconds=30),
        "retry_policy": RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1)),
        "summary": f"guardrails: {guards.stage} ({names})",
        "priority": tenant_priority(req.tenant_id),
    }


def tool_attempts(info: ToolInfo | None) -> int:
    """Attempts of one tool call: the tool's ``max_attempts``, 1 for a tool the spec lacks."""
    return info.max_attempts if info else 1


def tokens_count(
    pinned: PinnedSpec,
    req: RunRequest,
    messages: list[dict[str, Any]],
    with_tools: bool,
    total: int,
) -> tuple[CountTokensInput, workflow.ActivityConfig]:
    """Input and options of ``tokens.count`` for ``messages`` (the new ones of ``total``)."""
    return CountTokensInput(
        model=pinned.spec.model,
        encoding=pinned.spec.compaction.encoding,
        messages=messages,
        tools=[t.openai_schema() for t in pinned.tools] if with_tools else [],
    ), {
        "start_to_close_timeout": timedelta(seconds=60),
        "summary": f"tokens: count {len(messages)} new messages of {total}",
        "priority": tenant_priority(req.tenant_id),
    }


def policy_judge(
    pinned: PinnedSpec,
    req: RunRequest,
    judge: JudgeSettings,
    call: ToolCallRequest,
    arguments: str | dict[str, Any],
    info: ToolInfo,
    policy_reason: str | None,
    tool_results: list[str],
) -> tuple[JudgeInput, workflow.ActivityConfig]:
    """Input and options of ``policy.judge`` for one call the policy asks about.

    One attempt within ``judge.timeout_seconds`` (start-to-close): a judge that fails or is late
    escalates to a person, it is not retried. The goal is the run's input; the spec's
    ``secrets`` names go along so their values are redacted from what the judge is shown.
    """
    inp = JudgeInput(
        model=judge.model,
        rubric=judge.rubric,
        goal=req.input,
        tool_call_id=call.id,
        tool=call.name,
        tool_description=info.description,
        risk=info.risk,
        arguments=arguments,
        policy_reason=policy_reason,
        tool_results=tool_results[-judge.tool_results :] if judge.tool_results else [],
        max_tokens=judge.max_tokens,
        response_format=judge.response_format,
        secrets=pinned.spec.secrets,
    )
    return inp, {
        "start_to_close_timeout": timedelta(seconds=judge.timeout_seconds),
        "retry_policy": RetryPolicy(maximum_attempts=1),
        "summary": f"judge: {call.name} ({judge.model})",
        "priority": tenant_priority(req.tenant_id),
    }
