"""Which attempts of a model step use up its limit (activities/model_attempts.py)."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from activities.model_attempts import COUNT_KEY, failures_so_far, final


def test_without_max_attempts_every_earlier_attempt_counts():
    assert failures_so_far(1, [], limited=False) == 0
    assert failures_so_far(5, [{COUNT_KEY: 1}], limited=False) == 4


def test_with_max_attempts_only_the_models_failures_count():
    # attempts 2..6 were lost with workers: their heartbeats repeated the count they started with
    assert failures_so_far(7, [{"waiting_ms": 2500, COUNT_KEY: 1}], limited=True) == 1
    assert failures_so_far(2, [{"error": "HTTP 503", COUNT_KEY: 1}], limited=True) == 1
    assert failures_so_far(9, [], limited=True) == 0  # no heartbeat ever: nothing counted


def test_a_count_that_is_not_a_count_is_zero():
    for bad in ["3", -1, True, 2.5, None]:
        assert failures_so_far(4, [{COUNT_KEY: bad}], limited=True) == 0
    assert failures_so_far(4, ["text", 7, {COUNT_KEY: 2}], limited=True) == 2


def test_the_failure_that_reaches_the_limit_is_final():
    err = ApplicationError("model server answered HTTP 503", {"k": 1}, type="ModelUnavailable")
    assert final(err, 1, 2) is err and not err.non_retryable
    last = final(err, 2, 2)
    assert last.non_retryable and last.type == "ModelUnavailable"
    assert "failed 2 attempt(s)" in last.message and list(last.details) == [{"k": 1}]


def test_the_retry_policy_counts_inputs_recorded_before():
    err = ApplicationError("HTTP 503", type="ModelUnavailable")
    assert final(err, 99, None) is err


def test_large_replies_returned_are_remembered_per_step_and_bounded():
    from activities.model_attempts import Returned, used_up

    returned = Returned(size=2)
    returned.note(("run-1", "7"))
    returned.note(("run-1", "7"))
    assert returned.count(("run-1", "7")) == 2 and returned.count(("run-1", "8")) == 0
    returned.note(("run-2", "1"))
    returned.note(("run-3", "1"))  # the oldest step is forgotten
    assert returned.count(("run-1", "7")) == 0 and returned.count(("run-3", "1")) == 1
    assert used_up(1, 2) is None and used_up(5, None) is None
    err = used_up(2, 2)
    assert err is not None and err.non_retryable and "PayloadsTooLarge" in err.message
