"""The parts of one ``model.complete`` attempt that need no client (used by :mod:`activities.model`).

The request it sends, what it makes of the reply, its events and errors: pure functions over the
activity's input and the reply, tested without a server.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, cast

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.contracts import (
    CallModelInput,
    ModelReply,
    StepToolCall,
    ToolCallRequest,
    ToolOutcome,
    Usage,
)
from activities.mcp.config import canonical_tool_name
from activities.model_reply import cached_prompt_count, token_count, without_lone_surrogates
from activities.rules import failed_status, token_upper_bound, tool_finished_fields
from activities.streaming import ReplyCutOff


def normalise(completion: Any, requested_model: str) -> ModelReply:
    """Turn a ``ChatCompletion`` into a :class:`ModelReply`; raise ValueError on a malformed one."""
    choices = getattr(completion, "choices", None)
    if not choices:
        raise ValueError(f"reply has no choices: {str(completion)[:200]!r}")
    if not choices[0].finish_reason:
        raise ReplyCutOff("the reply has no finish_reason: it was cut off")
    msg = choices[0].message
    calls: list[ToolCallRequest] = []
    for i, tc in enumerate(msg.tool_calls or []):
        fn = tc.function
        arguments = without_lone_surrogates(fn.arguments or "{}")
        calls.append(ToolCallRequest(id=tc.id or f"call_{i}", name=fn.name, arguments=arguments))
    u = completion.usage
    prompt = token_count(getattr(u, "prompt_tokens", 0))
    usage = Usage(
        prompt_tokens=prompt,
        completion_tokens=token_count(getattr(u, "completion_tokens", 0)),
        total_tokens=token_count(getattr(u, "total_tokens", 0)),
        cached_prompt_tokens=cached_prompt_count(u, timings_of(completion), prompt),
    )
    return ModelReply(
        content=msg.content,
        tool_calls=calls,
        usage=usage,
        finish_reason=choices[0].finish_reason,
        model=getattr(completion, "model", None) or requested_model,
    )


def timings_of(completion: Any) -> object:
    """llama.cpp's ``timings`` of a reply or chunk (an extra field the SDK keeps), or None."""
    extra = getattr(completion, "model_extra", None)
    return cast("dict[str, Any]", extra).get("timings") if isinstance(extra, dict) else None


def request_kwargs(req: CallModelInput, after_invalid_output: bool = False) -> dict[str, Any]:
    """The ``chat.completions.create`` arguments for ``req``.

    A retry sends the same request. Only when the previous attempt failed on output that could
    not be read (``after_invalid_output``) and the spec sets ``retry_temperature_step`` is the
    temperature raised by that step (capped at 1.0): a retry of the same prompt at the same
    temperature tends to repeat an unparsable output. A rate limit, a 5xx, a cut-off stream or a
    worker crash never changes the request.
    """
    temperature = req.settings.temperature
    if after_invalid_output and req.settings.retry_temperature_step > 0:
        temperature = min(1.0, temperature + req.settings.retry_temperature_step)
    kwargs: dict[str, Any] = {
        "model": req.model,
        "messages": req.messages,
        "temperature": temperature,
    }
    if req.settings.max_tokens:
        kwargs["max_tokens"] = req.settings.max_tokens
    if req.settings.top_p is not None:
        kwargs["top_p"] = req.settings.top_p
    if req.tools:
        kwargs["tools"] = req.tools
    return kwargs


def settle_reply(reply: ModelReply, req: CallModelInput) -> None:
    """Canonicalise the reply's tool names against those offered and price its usage (USD).

    Prompt tokens from the endpoint's cache are priced at ``cached_prompt_price_per_mtok`` (when
    the spec sets one), the rest of the prompt at ``prompt_price_per_mtok``.
    """
    offered = {t.get("function", {}).get("name") for t in req.tools}
    for call in reply.tool_calls:  # MCP tools may be called `server.tool`: `server__tool`
        call.name = canonical_tool_name(call.name, offered)
    u = reply.usage
    cached_price = req.cached_prompt_price_per_mtok
    if cached_price is None:
        cached_price = req.prompt_price_per_mtok
    u.cost_usd = round(
        (u.prompt_tokens - u.cached_prompt_tokens) * req.prompt_price_per_mtok / 1e6
        + u.cached_prompt_tokens * cached_price / 1e6
        + u.completion_tokens * req.completion_price_per_mtok / 1e6,
        8,
    )


def log_step(bound: Any, reply: ModelReply, batches: int) -> None:
    """The ``model_step`` log event of a step that answered (tokens, cost, calls, streaming)."""
    bound.info(
        "model_step",
        latency_ms=reply.latency_ms,
        prompt_tokens=reply.usage.prompt_tokens,
        completion_tokens=reply.usage.completion_tokens,
        total_tokens=reply.usage.total_tokens,
        cost_usd=reply.usage.cost_usd,
        tool_calls=[c.name for c in reply.tool_calls],
        streamed_chars=reply.streamed_chars,
        stream_batches=batches,
    )


def finished_event(first: StepToolCall, out: ToolOutcome) -> dict[str, Any]:
    """The ``tool_finished`` event of a ``tools_first`` call, as the workflow would emit it.

    Built by :func:`activities.rules.tool_finished_fields`, as the workflow's; the model's
    arguments, and ``run_arguments`` when the tool's validated ones differ.
    """
    call = first.call
    arguments: Any = call.arguments
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    ran = out.arguments if out.failure is None and out.arguments != arguments else None
    status = out.status if out.failure is None else failed_status(out.timed_out)
    duration = out.duration_ms if out.failure is None else None
    fields = tool_finished_fields(
        call.call_id, call.name, arguments, ran, status, duration, out.content
    )
    return {"type": "tool_finished", "turn": call.turn, **fields}


def with_outcomes(
    err: ApplicationError, outcomes: list[ToolOutcome], published: bool
) -> ApplicationError:
    """``err`` with one more detail: the ``tools_first`` results and whether they were published.

    The detail is ``{"tool_outcomes": [...], "published": bool}``. The workflow records them
    from the step's failure (workflows/model_step.py, ToolsFirst), so a model that fails for good loses
    none of the calls that ran before it.
    """
    return ApplicationError(
        err.message,
        *err.details,
        {"tool_outcomes": [o.model_dump(mode="json") for o in outcomes], "published": published},
        type=err.type,
        non_retryable=err.non_retryable,
        next_retry_delay=err.next_retry_delay,
    )


def over_room(req: CallModelInput) -> bool:
    """Whether the messages after ``req.counted_messages`` may be over ``req.token_room`` tokens.

    The bound is the workflow's own (``activities.rules.token_upper_bound``), so the workflow
    would count, and maybe compact, before it asked the model.
    """
    if req.token_room is None:
        return False
    return sum(token_upper_bound(m) for m in req.messages[req.counted_messages :]) > req.token_room


RECORDABLE_CHARS = 512 * 1024
"""Characters of a reply's text and arguments below which it is surely recorded: Temporal's
payload warning size (512 KiB); the hard limit is 2 MiB (docs/temporal-facts.md)."""


def may_be_too_large(reply: ModelReply) -> bool:
    """Whether ``reply`` may be too large for Temporal to record.

    Its upload then fails the attempt after the activity returned, so such an attempt is counted
    as the model's failure before it returns (activities/model_attempts.py).
    """
    chars = len(reply.content or "") + sum(len(c.arguments) for c in reply.tool_calls)
    return chars >= RECORDABLE_CHARS


def previous_error_type(info: activity.Info) -> str | None:
    """The error type the previous attempt heartbeated before it failed (None on attempt 1)."""
    if info.attempt <= 1:
        return None
    for detail in info.heartbeat_details or ():
        fields = cast("dict[str, Any]", detail) if isinstance(detail, dict) else None
        if fields is not None and fields.get("error_type"):
            return str(fields["error_type"])
    return None
