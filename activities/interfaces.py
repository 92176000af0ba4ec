"""The activities as the workflow calls them: stable name, one input model, one result model.

Workflow code references these declarations (``workflow.execute_activity(model_complete, ...)``), so
"go to definition" lands on a typed signature and the result type comes from it, while workflow
modules import no activity implementation (no HTTP client, tool registry or MCP library in the
sandbox or in a client that only starts runs). The worker registers the implementations, which
carry the same Temporal names, Python names and types (grep ``tool_invoke`` and you find the
declaration, its options in :mod:`workflows.activity_options` and the implementation);
``tests/unit/test_interfaces.py`` checks that they match.

| declaration | implementation |
|---|---|
| :func:`spec_resolve` | :meth:`activities.runtime.RuntimeActivities.spec_resolve` |
| :func:`model_complete` | :meth:`activities.model.ModelActivities.model_complete` |
| :func:`tool_invoke` | :meth:`activities.runtime.RuntimeActivities.tool_invoke` |
| :func:`tokens_count` | :func:`activities.tokens.tokens_count` |
| :func:`code_step` | :meth:`activities.code_mode.CodeRunner.code_step` |
| :func:`guardrail_check` | :meth:`activities.runtime.RuntimeActivities.guardrail_check` |
| :func:`policy_judge` | :meth:`activities.model.ModelActivities.policy_judge` |
"""

from __future__ import annotations

from temporalio import activity

from activities.contracts import (
    CODE_STEP,
    GUARDRAIL_CHECK,
    MODEL_COMPLETE,
    SPEC_RESOLVE,
    TOKENS_COUNT,
    TOOL_INVOKE,
    CallModelInput,
    CodeStepInput,
    CodeStepOutput,
    CountTokensInput,
    InvokeToolInput,
    ModelReply,
    ResolveSpecInput,
    TokenCounts,
    ToolOutcome,
)
from activities.guardrail_models import GuardrailCheckInput, GuardrailCheckOutput
from activities.judge import POLICY_JUDGE, JudgeInput, JudgeVerdict
from activities.spec import PinnedSpec

_DECLARATION = "declaration only: the worker registers the implementation under this name"


@activity.defn(name=SPEC_RESOLVE)
async def spec_resolve(req: ResolveSpecInput) -> PinnedSpec:
    """Read, validate and hash one agent of the spec file; list its tools (and MCP servers').

    Raises:
        ApplicationError: non-retryable ``AgentSpecInvalid`` naming the file and field.
    """
    raise NotImplementedError(_DECLARATION)


@activity.defn(name=MODEL_COMPLETE)
async def model_complete(req: CallModelInput) -> ModelReply:
    """One model step: a chat-completions request, heartbeating; returns the normalised reply.

    Raises:
        ApplicationError: ``ModelOutputInvalid``, ``ModelRequestRejected`` (non-retryable) or
            ``ModelUnavailable`` (retryable), classified from the endpoint's answer.
    """
    raise NotImplementedError(_DECLARATION)


@activity.defn(name=TOOL_INVOKE)
async def tool_invoke(req: InvokeToolInput) -> ToolOutcome:
    """Run one tool call; business errors come back as ``status="error"`` for the model."""
    raise NotImplementedError(_DECLARATION)


@activity.defn(name=TOKENS_COUNT)
async def tokens_count(req: CountTokensInput) -> TokenCounts:
    """Count the tokens of messages and tool schemas with the model's encoding."""
    raise NotImplementedError(_DECLARATION)


@activity.defn(name=CODE_STEP)
async def code_step(req: CodeStepInput) -> CodeStepOutput:
    """Run a Code Mode script up to its next batch of tool calls, or its end (in bubblewrap).

    Raises:
        ApplicationError: ``SandboxUnavailable`` (retryable) or ``CodeSnapshotInvalid``.
    """
    raise NotImplementedError(_DECLARATION)


@activity.defn(name=GUARDRAIL_CHECK)
async def guardrail_check(req: GuardrailCheckInput) -> GuardrailCheckOutput:
    """Check one user message with the spec's ``input`` guardrails (run as a local activity)."""
    raise NotImplementedError(_DECLARATION)


@activity.defn(name=POLICY_JUDGE)
async def policy_judge(req: JudgeInput) -> JudgeVerdict:
    """The judge's verdict on one call the policy asks about (activities/judge.py).

    An unreadable answer comes back as ``escalate``; a failed endpoint raises (the workflow
    escalates then too).
    """
    raise NotImplementedError(_DECLARATION)


DECLARATIONS = (
    spec_resolve,
    model_complete,
    tool_invoke,
    tokens_count,
    code_step,
    guardrail_check,
    policy_judge,
)
"""Every activity the workflow schedules."""
