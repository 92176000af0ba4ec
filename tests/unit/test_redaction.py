"""activities/redaction.py: errors, heartbeats, results and log records leave redacted."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
)

from activities import redaction
from activities.contracts import ToolOutcome
from activities.redaction import (
    PieceRedactor,
    RedactingFilter,
    RedactingInterceptor,
    Redactor,
    redact_error,
    redactor_for,
)

KEY = "sk-unit-" + "Z" * 30


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("SPEC_TOKEN", "tok-123456")


def test_redactor_strings_values_and_models():
    r = redactor_for(["SPEC_TOKEN"])
    assert r.redact(f"a {KEY} b tok-123456") == "a [REDACTED] b [REDACTED]"
    assert r.value({"k": [f"x{KEY}", 3], KEY: None}) == {
        "k": ["x[REDACTED]", 3],
        "[REDACTED]": None,
    }
    out = ToolOutcome(call_id="c", name="t", status="ok", content=f"key {KEY}")
    assert r.value(out).content == "key [REDACTED]"
    clean = ToolOutcome(call_id="c", name="t", status="ok", content="nothing")
    assert r.value(clean) is clean  # unchanged models are not rebuilt
    assert Redactor(["abc", ""]).redact("abc") == "abc"  # too short to be a secret
    quoted = Redactor(['pa"ss\\word'])
    assert quoted.redact(json.dumps({"p": 'pa"ss\\word'})) == '{"p": "[REDACTED]"}'


def test_redact_error_keeps_type_retryability_and_redacts_the_chain():
    r = redactor_for()
    try:
        try:
            raise ValueError(f"inner {KEY}")
        except ValueError as inner:
            raise ApplicationError(
                f"outer {KEY}",
                {"detail": KEY},
                type="Upstream",
                non_retryable=True,
                next_retry_delay=timedelta(seconds=3),
            ) from inner
    except ApplicationError as e:
        new = redact_error(e, r)
    assert (new.message, new.type, new.non_retryable) == ("outer [REDACTED]", "Upstream", True)
    assert new.next_retry_delay == timedelta(seconds=3)
    assert new.details == ({"detail": "[REDACTED]"},)
    assert isinstance(new.__cause__, ApplicationError)
    assert (new.__cause__.message, new.__cause__.type) == ("inner [REDACTED]", "ValueError")
    assert not new.__cause__.non_retryable  # a plain exception stays retryable
    # an implicit chain (raised while handling another) is carried too
    try:
        try:
            raise KeyError(KEY)
        except KeyError:
            raise RuntimeError("while handling")  # noqa: B904 - the implicit chain is the point
    except RuntimeError as e:
        implicit = redact_error(e, r)
    assert implicit.__cause__ is not None and KEY not in str(implicit.__cause__)


class _Next(ActivityInboundInterceptor, ActivityOutboundInterceptor):
    """The end of both interceptor chains: records heartbeats, returns or raises as told."""

    def __init__(self, outcome: Any) -> None:  # nothing comes after it: no ``next``
        self.outcome = outcome
        self.beats: list[Any] = []

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        self.outbound = outbound

    def heartbeat(self, *details: Any) -> None:
        self.beats.append(details)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def _input(*args: Any) -> ExecuteActivityInput:
    return ExecuteActivityInput(fn=lambda: None, args=args, executor=None, headers={})


class _Req:
    secrets = ["SPEC_TOKEN"]


def test_interceptor_redacts_results_errors_and_heartbeats():
    nxt = _Next(f"result with tok-123456 and {KEY}")
    inbound = RedactingInterceptor().intercept_activity(nxt)
    inbound.init(nxt)
    assert asyncio.run(inbound.execute_activity(_input(_Req()))) == (
        "result with [REDACTED] and [REDACTED]"
    )
    assert isinstance(inbound.next, _Next)
    inbound.next.outbound.heartbeat({"note": KEY})  # what activity.heartbeat() reaches
    assert nxt.beats == [({"note": "[REDACTED]"},)]
    nxt.outcome = OSError(f"disk full near {KEY}")
    with pytest.raises(ApplicationError) as exc:
        asyncio.run(inbound.execute_activity(_input(_Req())))
    assert (exc.value.message, exc.value.type) == ("disk full near [REDACTED]", "OSError")
    assert exc.value.__suppress_context__  # the original is never printed with it
    nxt.outcome = asyncio.CancelledError()
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(inbound.execute_activity(_input(_Req())))


def test_logging_filter_redacts_message_args_extra_and_traceback():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            raise RuntimeError(f"boom {KEY}")
        except RuntimeError:
            logger.error("failed with %s", KEY, exc_info=True, extra={"ctx": {"k": KEY}})
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert "failed with [REDACTED]" in out and "boom [REDACTED]" in out
    assert KEY not in out


def test_spec_secret_names_seen_by_an_activity_are_redacted_from_later_logs():
    redaction.add_secret_names(["SPEC_TOKEN"])
    assert redaction.redact("tok-123456") == "[REDACTED]"


def test_logging_filter_never_raises():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%s and %s", (KEY,), None)
    assert RedactingFilter().filter(record)  # too few %-arguments: still emitted, redacted
    assert KEY not in record.getMessage()


SECRET = "sk-live-0123456789abcdef"


def _stream(text: str, cuts: list[int], redactor: Redactor) -> list[str]:
    """Feed ``text`` cut at ``cuts``, taking a batch after every piece; returns the batches."""
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    out = PieceRedactor(redactor)
    batches = []
    for p in pieces:
        out.add(p)
        batch = out.take()
        out.sent(batch)
        batches.append(batch)
    last = out.take(final=True)
    out.sent(last)
    return [*batches, last]


def test_a_secret_split_across_stream_batches_never_leaks_in_part():
    r = Redactor([SECRET, "tok-abcd"])
    text = f"here is the key {SECRET} and again {SECRET}; tok-abcd done"
    whole = r.redact(text)
    assert SECRET not in whole and "tok-abcd" not in whole
    for i in range(1, len(text)):
        for j in range(i + 1, len(text), 7):
            batches = _stream(text, [i, j], r)
            assert "".join(batches) == whole, (i, j)
            for b in batches:  # no batch ends with the first 4+ characters of a secret
                for n in range(4, len(SECRET)):
                    assert not b.endswith(SECRET[:n]), (i, j, b)
                assert not b.startswith(SECRET[-4:]), (i, j, b)


def test_text_without_secrets_streams_at_once_but_for_the_hold_back():
    r = Redactor([SECRET])
    out = PieceRedactor(r)
    out.add("x" * 100)
    first = out.take()
    assert first == "x" * (100 - (len(SECRET) - 1))  # the last len-1 characters wait
    assert PieceRedactor(Redactor([])).take() == ""
    none = PieceRedactor(Redactor([]))
    none.add("abc")
    assert none.take() == "abc"  # no secrets: nothing is held back
