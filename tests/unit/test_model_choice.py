"""Which model a failed model step tries next; the tenant's fairness key (pure, no server)."""

from __future__ import annotations

import pytest
from temporalio.common import Priority
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, RetryState

from activities.contracts import (
    ERR_MODEL_OUTPUT_INVALID,
    ERR_MODEL_REQUEST_REJECTED,
    ERR_MODEL_UNAVAILABLE,
    fairness_key,
)
from workflows.model_choice import next_model, tenant_priority

MODELS = ["a", "b", "c"]


def _err(state: RetryState | None, cause: BaseException | None) -> ActivityError:
    e = ActivityError(
        "activity failed",
        scheduled_event_id=5,
        started_event_id=6,
        identity="w",
        activity_type="model.complete",
        activity_id="1",
        retry_state=state,
    )
    e.__cause__ = cause
    return e


@pytest.mark.parametrize(
    ("state", "cause"),
    [
        (
            RetryState.NON_RETRYABLE_FAILURE,
            ApplicationError("401", type=ERR_MODEL_REQUEST_REJECTED),
        ),
        (RetryState.MAXIMUM_ATTEMPTS_REACHED, ApplicationError("503", type=ERR_MODEL_UNAVAILABLE)),
        (RetryState.TIMEOUT, None),
    ],
)
def test_a_step_that_failed_for_good_goes_to_the_next_model(
    state: RetryState, cause: BaseException | None
) -> None:
    assert next_model(MODELS, 0, _err(state, cause)) == "b"
    assert next_model(MODELS, 1, _err(state, cause)) == "c"
    assert next_model(MODELS, 2, _err(state, cause)) is None
    assert next_model(["only"], 0, _err(state, cause)) is None


def test_unparsable_output_and_cancellation_do_not_change_models() -> None:
    invalid = ApplicationError("bad", type=ERR_MODEL_OUTPUT_INVALID, non_retryable=True)
    assert next_model(MODELS, 0, _err(RetryState.NON_RETRYABLE_FAILURE, invalid)) is None
    cancelled = _err(RetryState.CANCEL_REQUESTED, CancelledError("interrupted"))
    assert next_model(MODELS, 0, cancelled) is None
    assert next_model(MODELS, 0, _err(None, None)) is None


def test_tenant_priority() -> None:
    assert tenant_priority("acme") == Priority(fairness_key="acme")
    assert tenant_priority("") == Priority.default
    long = "t" * 65
    key = tenant_priority(long).fairness_key
    assert key == fairness_key(long) and key is not None and len(key.encode()) <= 64
    assert fairness_key("t" * 64) == "t" * 64
    assert fairness_key("t" * 65) != fairness_key("t" * 66)
    assert len(fairness_key("é" * 40).encode()) <= 64
