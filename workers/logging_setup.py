"""structlog configuration for workers and the CLI: JSON lines, one event per line, always.

Every line the process logs is one JSON object: structlog events, stdlib ``logging`` records (the
Temporal SDK's ``temporalio.*`` loggers, warnings raised inside the workflow sandbox, Python
``warnings``) and, in a worker, the SDK core's own (Rust) log lines, forwarded into ``logging``.
Secrets are redacted from all of them (:mod:`activities.redaction`).

Rendering never imports anything: the workflow sandbox forbids imports of most modules while a
workflow logs (``RestrictedWorkflowAccessError``), so tracebacks are formatted with the standard
library's ``traceback`` (never structlog's ``rich``/``better-exceptions`` fallbacks) and the
JSON renderer falls back to ``str`` for values it cannot encode.
"""

from __future__ import annotations

import logging
import sys
import traceback
from types import TracebackType
from typing import Any, cast

import structlog
from structlog.typing import EventDict

from activities.redaction import RedactingFilter, redact_event
from workers.telemetry import add_activity_context, add_trace_ids


def _format_exc_info(logger: Any, method: str, event: EventDict) -> EventDict:
    """Render ``exc_info`` as ``exception`` text with :mod:`traceback` (nothing imported)."""
    exc_info = event.pop("exc_info", None)
    if exc_info:
        if exc_info is True:
            exc_info = sys.exc_info()
        elif isinstance(exc_info, BaseException):
            exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
        if isinstance(exc_info, tuple) and exc_info[0] is not None:
            # logging's exc_info triple: (type, value, traceback)
            triple = cast(
                "tuple[type[BaseException], BaseException, TracebackType | None]", exc_info
            )
            event["exception"] = "".join(traceback.format_exception(*triple)).rstrip()
    return event


def _add_exc_text(logger: Any, method: str, event: EventDict) -> EventDict:
    """Carry a stdlib record's pre-rendered (redacted) traceback into the event."""
    record = event.get("_record")
    text = getattr(record, "exc_text", None)
    if text and "exc_info" not in event:
        event["exception"] = text
    return event


_EXTRA = structlog.stdlib.ExtraAdder()  # the record's `extra=` fields (the SDK's workflow info)


def _drop_core_entry(logger: Any, method: str, event: EventDict) -> EventDict:
    """Drop the SDK core's raw log entry object (its text is already the event)."""
    event.pop("temporal_log", None)
    return event


def _json() -> structlog.processors.JSONRenderer:
    return structlog.processors.JSONRenderer(default=str)


def configure_logging(level: str = "info", stream=None, forward_core: bool = False) -> None:  # noqa: ANN001
    """Send structlog events and stdlib logging (incl. the Temporal SDK's) as JSON lines.

    Args:
        level: ``debug``, ``info``, ``warning`` or ``error``.
        stream: where to write; standard error by default, so stdout stays clean for ``--json``.
        forward_core: also forward the Temporal SDK core's own log lines (Rust, written straight
            to standard error otherwise) into ``logging``, as logger ``temporalio.core``. Sets
            the process's default Temporal runtime, so call it before the first client connects.
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
        processors=[*shared, _format_exc_info, redact_event, _json()],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        # One write per line (message and newline together): `print` writes them apart, so a
        # line from another thread (the SDK core's forwarded logs) could land between the two.
        logger_factory=structlog.WriteLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                _format_exc_info,
                redact_event,
                _json(),
            ],
            foreign_pre_chain=[
                *shared,
                structlog.stdlib.add_logger_name,
                _EXTRA,
                _drop_core_entry,
                _add_exc_text,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)
    logging.captureWarnings(True)  # Python warnings become `py.warnings` records: JSON too
    if forward_core:
        _forward_core_logs(level)


def _forward_core_logs(level: str) -> None:
    from temporalio.runtime import (
        LogForwardingConfig,
        LoggingConfig,
        Runtime,
        TelemetryConfig,
        TelemetryFilter,
    )

    core = {"debug": "DEBUG", "info": "INFO"}.get(level.lower(), "WARN")
    logging_config = LoggingConfig(
        filter=TelemetryFilter(core_level=core, other_level="WARN"),
        forwarding=LogForwardingConfig(logger=logging.getLogger("temporalio.core")),
    )
    runtime = Runtime(telemetry=TelemetryConfig(logging=logging_config))
    Runtime.set_default(runtime, error_if_already_set=False)
    _core_logging[:] = [logging_config]


_core_logging: list[Any] = []


def core_logging_config() -> Any:
    """The ``LoggingConfig`` of :func:`configure_logging`'s ``forward_core`` (None without it).

    A second Temporal runtime of the process (the metrics one, :mod:`workers.metrics_server`)
    takes it too, so the core's log lines stay JSON lines of ours.
    """
    return _core_logging[0] if _core_logging else None
