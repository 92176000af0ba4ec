"""Which attempts of a model step use up its limit: the model's failures, not lost workers.

A model step may be tried ``CallModelInput.max_attempts`` times by the model server's fault (an
HTTP error, an unreadable or stalled reply). An attempt that ended because its worker died (a
heartbeat timeout) or never reported back (a start-to-close timeout) is the infrastructure's: it
does not count. Under chaos (two workers SIGKILLed alternately every ~4 s, 93 kills in 7 min) one
run of 200 failed with "model step failed: activity Heartbeat timeout" after its 8 attempts were
each lost to a killed worker (issue #35); Temporal's ``maximum_attempts`` counts every attempt.

So the step's retry policy sets no maximum of its own (the run's deadline, its schedule-to-close
timeout, bounds it), and the count of the model's failures travels in the attempt's heartbeat
details, which Temporal hands to the next attempt: every heartbeat of ``model.complete`` carries
``{"model_failures": n}``, and the attempt whose failure makes ``n`` reach the limit raises a
non-retryable error. An attempt that dies keeps the count it started with (its heartbeats
repeat it; one that dies before its first heartbeat leaves the previous details in place).

An attempt that returns a reply too large for Temporal to record (over 2 MiB inline) fails after
it returned, with nothing of ours in between: :class:`Returned` remembers, in the worker's memory,
the large replies each step returned, so the next attempt on the same worker counts them and the
step ends once they reach the limit (on another worker such an attempt counts as lost, and the
run's deadline bounds it).

Inputs recorded before ``max_attempts`` existed (None) keep the old rule: Temporal's
``maximum_attempts`` counts every attempt, so the attempt number is the count.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, cast

from temporalio.exceptions import ApplicationError

COUNT_KEY = "model_failures"
"""The heartbeat detail holding how many earlier attempts the model server failed."""


def failures_so_far(attempt: int, details: Sequence[Any], limited: bool) -> int:
    """How many earlier attempts of this step failed by the model's fault.

    Args:
        attempt: this attempt's number (``activity.info().attempt``, from 1).
        details: the heartbeat details the previous attempt left (``activity.info()``).
        limited: the input carries ``max_attempts`` (else every earlier attempt counts).
    """
    if not limited:
        return attempt - 1
    for detail in details:
        if isinstance(detail, dict):
            value = cast("dict[str, Any]", detail).get(COUNT_KEY)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    return 0


def as_application_error(exc: BaseException) -> ApplicationError:
    """``exc`` as a retryable ``ApplicationError`` of its own type name and message."""
    return ApplicationError(f"{type(exc).__name__}: {exc}", type=type(exc).__name__)


def final(err: ApplicationError, failures: int, max_attempts: int | None) -> ApplicationError:
    """``err``, made non-retryable when ``failures`` (this one included) reach ``max_attempts``.

    With ``max_attempts`` None the retry policy's own maximum ends the step, so ``err`` is
    returned as it is.
    """
    if max_attempts is None or err.non_retryable or failures < max_attempts:
        return err
    return ApplicationError(
        f"{err.message} (the model failed {failures} attempt(s), the step's limit)",
        *err.details,
        type=err.type,
        non_retryable=True,
    )


class Returned:
    """Large replies each step returned on this worker: ``{step key: how many}``, bounded.

    A step key is the workflow run and activity id (``activity.info()``); at most ``size`` steps
    are remembered, the oldest forgotten first.
    """

    def __init__(self, size: int = 1024) -> None:
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._size = size

    def note(self, key: tuple[str, str]) -> None:
        """One more large reply returned by step ``key``."""
        self._counts[key] = self._counts.pop(key, 0) + 1
        while len(self._counts) > self._size:
            self._counts.popitem(last=False)

    def count(self, key: tuple[str, str]) -> int:
        """How many large replies step ``key`` returned on this worker."""
        return self._counts.get(key, 0)


def used_up(failures: int, max_attempts: int | None) -> ApplicationError | None:
    """The error an attempt raises at once when ``failures`` already reach ``max_attempts``."""
    if max_attempts is None or failures < max_attempts:
        return None
    return ApplicationError(
        f"model step failed: its last {failures} attempt(s) returned replies Temporal could not "
        "record (PayloadsTooLarge: over the 2 MiB payload limit; AGENT_PAYLOAD_STORE keeps "
        "large payloads outside the history)",
        type="PayloadsTooLarge",
        non_retryable=True,
    )
