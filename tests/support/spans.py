"""Finished OpenTelemetry spans, as the telemetry tests read them back.

``ReadableSpan`` types a span's context and times as optional (an open span has no end time);
every span an exporter received has ended, so these assert them set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the tests import opentelemetry where they use it
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext


def span_context(span: ReadableSpan) -> SpanContext:
    """The span's ids (``trace_id``, ``span_id``)."""
    assert span.context is not None
    return span.context


def span_start(span: ReadableSpan) -> int:
    """When the span started, ns since the epoch."""
    assert span.start_time is not None
    return span.start_time


def span_end(span: ReadableSpan) -> int:
    """When the span ended, ns since the epoch."""
    assert span.end_time is not None
    return span.end_time
