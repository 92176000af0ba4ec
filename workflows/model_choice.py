"""Which model a model step tries next, and the run's fairness key: pure, tested without a server.

A spec's ``model:`` may list fallbacks (:meth:`activities.spec.AgentSpec.models`). Each model step
starts with the primary; a step that fails for good on one model (its error is not retryable, or
its retries or its timeout are exhausted) is tried on the next one. An unparsable model output is
not a reason to change models: the run tells the model instead (``turn.after_parse_failure``).
"""

from __future__ import annotations

from temporalio.common import Priority
from temporalio.exceptions import ActivityError, ApplicationError, RetryState

from activities.contracts import ERR_MODEL_OUTPUT_INVALID, fairness_key

FINAL_RETRY_STATES = frozenset(
    {
        RetryState.NON_RETRYABLE_FAILURE,
        RetryState.MAXIMUM_ATTEMPTS_REACHED,
        RetryState.TIMEOUT,
    }
)
"""How a model activity ended for good on its model (not cancelled, not in progress)."""


def next_model(models: list[str], index: int, error: ActivityError) -> str | None:
    """The model to try after ``models[index]`` failed with ``error``, or None (the step fails).

    None when the error is an unparsable output, when the activity was cancelled or did not end
    for good, or when ``models[index]`` is the last one.
    """
    cause = error.cause
    if isinstance(cause, ApplicationError) and cause.type == ERR_MODEL_OUTPUT_INVALID:
        return None
    if error.retry_state not in FINAL_RETRY_STATES:
        return None
    return models[index + 1] if index + 1 < len(models) else None


def tenant_priority(tenant_id: str) -> Priority:
    """The priority of every activity of a tenant's run: the tenant is its fairness key.

    Temporal dispatches backlogged tasks of one queue round-robin across fairness keys, so one
    tenant's thousand runs do not starve another's one (README "Fairness between tenants").
    """
    key = fairness_key(tenant_id)
    return Priority(fairness_key=key) if key else Priority.default
