"""structlog configuration for workers and the CLI: JSON lines, one event per line."""

from __future__ import annotations

import logging
import sys

import structlog

from workers.telemetry import add_activity_context, add_trace_ids


def configure_logging(level: str = "info", stream=None) -> None:  # noqa: ANN001 - a text stream
    """Send structlog events (and stdlib logging, incl. the Temporal SDK's) as JSON lines.

    Args:
        level: ``debug``, ``info``, ``warning`` or ``error``.
        stream: where to write; standard error by default, so stdout stays clean for ``--json``.
    """
    stream = stream or sys.stderr
    lvl = getattr(logging, level.upper(), logging.INFO)
    shared = [
        structlog.contextvars.merge_contextvars,
        add_activity_context,  # run_id (workflow id), activity, attempt inside activities
        add_trace_ids,  # OpenTelemetry trace_id/span_id when a span is current (AGENT_OTEL)
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
