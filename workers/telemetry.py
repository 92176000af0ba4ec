"""OpenTelemetry traces of runs (optional) and the structlog processors that tie logs to them.

Off by default (``AGENT_OTEL=off``): this module then imports nothing from ``opentelemetry`` and
:func:`temporal_plugins` returns no plugin. With ``AGENT_OTEL=otlp`` (spans to
``OTEL_EXPORTER_OTLP_ENDPOINT`` over OTLP/HTTP) or ``AGENT_OTEL=console`` (spans as JSON on
standard error), :func:`workers.client.connect` adds the SDK's ``OpenTelemetryPlugin`` to the
client; every worker built from that client picks it up (``Worker`` takes the client's plugins),
so one setting traces both sides.

Why the plugin and not the older ``TracingInterceptor`` (temporalio 1.35 ships both): the
plugin's workflow span lasts as long as the run (the interceptor's are zero-length markers), its
ids come from the workflow's deterministic random, so a worker that replays a run after a restart
re-creates the same span instead of an orphan, and it also traces runs started without a
client-side span (``temporal workflow start``, the Web UI). One trace per run::

    StartWorkflow:AgentRun                 client that started the run (when traced)
      RunWorkflow:AgentRun                 the whole run; exported when the run closes
        StartActivity:spec.resolve           RunActivity:spec.resolve (child)
        StartActivity:model.complete         RunActivity:model.complete (child), per model step
          RunTool:<tool>                       a local tool's call riding that step (model_step.py, ToolsFirst)
        StartActivity:tool.invoke            RunActivity:tool.invoke (child), per tool call

Spans carry ``temporalWorkflowID`` (the run id) and ``temporalRunID`` attributes. Queries,
signals and updates are traces of their own (``QueryWorkflow:state`` ...). The plugin needs the
process-wide tracer provider to be the SDK's ``ReplaySafeTracerProvider``;
:func:`configure_tracing` installs one (OpenTelemetry allows one global provider per process, so
the first configuration chooses the exporter and later ones reuse it). Two fixes for the
plugin's behaviour when a worker stops with runs cached (measured with temporalio 1.35): the
span processors drop the duplicate, cut-short ``RunWorkflow`` span the garbage collector would
end, and OpenTelemetry's "Failed to detach context" traceback for it is filtered out.

Logs: :func:`add_activity_context` and :func:`add_trace_ids` are structlog processors (wired in
:mod:`workers.logging_setup`). Inside an activity every event gets ``run_id`` (the workflow id,
the run's own trace id across continue-as-new), ``activity`` and ``attempt`` unless it already has
them; when an OpenTelemetry span is current, ``trace_id`` and ``span_id`` (hex, as in the OTLP
data) link the event to the span.
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
from collections.abc import MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from temporalio import activity, workflow

from workers.config import Settings, load_settings

if TYPE_CHECKING:  # pragma: no cover - typing only, never imported at run time
    from opentelemetry.sdk.trace.export import SpanExporter
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider
    from temporalio.plugin import SimplePlugin

__all__ = [
    "INSTALL_HINT",
    "TelemetryUnavailableError",
    "add_activity_context",
    "add_trace_ids",
    "build_span_exporter",
    "build_tracer_provider",
    "configure_tracing",
    "flush_tracing",
    "otlp_traces_endpoint",
    "temporal_plugins",
    "tracing_requested",
]

INSTALL_HINT = (
    "pip install 'temporal-agent-runtime[otel]' (from a checkout: pip install -e '.[otel]'; the packages "
    "are opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)"
)
"""How to install the optional ``otel`` dependency group; quoted by every error about it."""

DEFAULT_OTLP_ENDPOINT = "http://localhost:4318"

_REQUIRED_MODULES: dict[str, tuple[str, ...]] = {
    "console": ("opentelemetry.sdk.trace",),
    "otlp": ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"),
    "exporter": ("opentelemetry.sdk.trace",),
}

_lock = threading.Lock()
_configured = False  # True once this process has chosen its span exporter


class TelemetryUnavailableError(RuntimeError):
    """Tracing was asked for but cannot be set up (packages missing, foreign tracer provider)."""


def tracing_requested(settings: Settings) -> bool:
    """True when ``AGENT_OTEL`` asks for traces (``otlp`` or ``console``)."""
    return settings.otel != "off"


def otlp_traces_endpoint(settings: Settings) -> str:
    """URL the OTLP/HTTP exporter posts spans to.

    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as is, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` +
    ``/v1/traces`` (the OpenTelemetry specification's rule), else ``http://localhost:4318/v1/traces``.
    """
    if settings.otel_traces_endpoint:
        return settings.otel_traces_endpoint
    base = settings.otel_endpoint or DEFAULT_OTLP_ENDPOINT
    return base.rstrip("/") + "/v1/traces"


def _require(mode: str) -> None:
    """Import what ``mode`` needs, or raise :class:`TelemetryUnavailableError` naming the fix."""
    for name in _REQUIRED_MODULES[mode]:
        try:
            importlib.import_module(name)
        except ImportError as e:
            what = f"AGENT_OTEL={mode}" if mode != "exporter" else "tracing"
            raise TelemetryUnavailableError(
                f"{what} needs OpenTelemetry, but {e.name or name} is not installed. "
                f"Install it with: {INSTALL_HINT}; or set AGENT_OTEL=off."
            ) from None


_WORKFLOW_SIDE_SPANS = (
    "RunWorkflow",
    "HandleSignal",
    "HandleUpdate",
    "ValidateUpdate",
    "HandleQuery",
)


def _ended_by_a_dropped_workflow(span: Any) -> bool:
    """True for a workflow-side span ended outside its own run's workflow loop.

    That happens when a worker stops with runs in its cache: the SDK drops their workflow
    coroutines and the garbage collector closes them later, anywhere; the plugin's open
    ``RunWorkflow`` span then ends there (its replay guard only looks at the workflow loop it
    happens to be in) and would be exported a second time, cut short and often with an ERROR
    status, under the same span id as the real one, which the worker that replays the run ends
    when the run closes (measured with temporalio 1.35).
    """
    if span.name.split(":", 1)[0] not in _WORKFLOW_SIDE_SPANS:
        return False
    run_id = (span.attributes or {}).get("temporalRunID")
    if not workflow.in_workflow():
        return True
    return run_id is not None and workflow.info().run_id != run_id


def _guarded(processor: Any) -> Any:
    """Wrap a span processor so spans of dropped workflow coroutines are not exported."""
    from opentelemetry.sdk.trace import SpanProcessor

    class _DroppedWorkflowSpanGuard(SpanProcessor):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            self._inner.on_start(span, parent_context=parent_context)

        def on_end(self, span: Any) -> None:
            if not _ended_by_a_dropped_workflow(span):
                self._inner.on_end(span)

        def shutdown(self) -> None:
            self._inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return self._inner.force_flush(timeout_millis)

    return _DroppedWorkflowSpanGuard(processor)


def build_span_exporter(settings: Settings) -> SpanExporter:
    """The span exporter ``settings.otel`` names (``otlp`` or ``console``).

    Raises:
        TelemetryUnavailableError: the packages are missing, or ``AGENT_OTEL=off``.
    """
    if settings.otel == "otlp":
        _require("otlp")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=otlp_traces_endpoint(settings))
    if settings.otel == "console":
        _require("console")
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        # standard error: standard output stays clean for `agentctl ... --json`
        return ConsoleSpanExporter(service_name=settings.otel_service_name, out=sys.stderr)
    raise TelemetryUnavailableError("AGENT_OTEL=off: no span exporter is configured")


def build_tracer_provider(
    settings: Settings, exporter: SpanExporter | None = None
) -> ReplaySafeTracerProvider:
    """A replay-safe tracer provider (not installed globally) exporting to ``exporter``.

    ``exporter`` defaults to :func:`build_span_exporter`; a given one gets a synchronous
    ``SimpleSpanProcessor`` (tests: spans are readable as soon as they end), the configured one a
    ``BatchSpanProcessor`` (export off the activity's and workflow's path). The resource's
    ``service.name`` is ``OTEL_SERVICE_NAME`` (``OTEL_RESOURCE_ATTRIBUTES`` are merged in by the
    OpenTelemetry SDK itself).

    Raises:
        TelemetryUnavailableError: the packages are missing, or no exporter is given and
            ``AGENT_OTEL=off``.
    """
    configured = exporter is None
    exporter = exporter if exporter is not None else build_span_exporter(settings)
    _require("exporter")
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from temporalio.contrib.opentelemetry import create_tracer_provider

    provider = create_tracer_provider(
        resource=Resource.create({SERVICE_NAME: settings.otel_service_name})
    )
    processor = BatchSpanProcessor if configured else SimpleSpanProcessor
    provider.add_span_processor(_guarded(processor(exporter)))
    return provider


class _DroppedWorkflowDetachFilter(logging.Filter):
    """Drops OpenTelemetry's "Failed to detach context" for workflow coroutines a worker dropped.

    When a worker stops with runs in its cache (e.g. waiting for approval), their workflow
    coroutines are closed by the garbage collector in another ``contextvars.Context``; the
    plugin's open ``RunWorkflow`` span then cannot detach its context token and OpenTelemetry
    logs a three-part traceback per cached run (measured with temporalio 1.35 and
    opentelemetry-sdk 1.45). Harmless: the span is re-created with the same ids by the worker
    that replays the run. Only that exact record is dropped.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (
            record.getMessage() == "Failed to detach context"
            and isinstance(exc, ValueError)
            and "was created in a different Context" in str(exc)
        )


_DETACH_FILTER = _DroppedWorkflowDetachFilter()


def configure_tracing(
    settings: Settings | None = None, *, exporter: SpanExporter | None = None
) -> ReplaySafeTracerProvider | None:
    """Install the process-wide replay-safe tracer provider; returns it (None when tracing is off).

    The first call that configures tracing installs the provider with its exporter: ``exporter``
    when given, else the one ``AGENT_OTEL`` names. Later calls reuse that provider and add no
    exporter of their own, except an explicitly given ``exporter``, which is always added (so a
    test can read spans with ``InMemorySpanExporter``). A provider installed by the application
    itself is reused when it is the SDK's ``ReplaySafeTracerProvider``.

    Args:
        settings: runtime settings (default :func:`workers.config.load_settings`); read: ``otel``,
            ``otel_endpoint``, ``otel_traces_endpoint``, ``otel_service_name``.
        exporter: an OpenTelemetry ``SpanExporter`` to add (synchronous processor).

    Raises:
        TelemetryUnavailableError: the packages are missing, or another kind of global tracer
            provider is installed (the Temporal plugin would refuse to build workers with it).
    """
    global _configured
    settings = settings or load_settings()
    if exporter is None and not tracing_requested(settings):
        return None
    _require("exporter" if exporter is not None else settings.otel)
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from temporalio.contrib.opentelemetry import ReplaySafeTracerProvider

    with _lock:
        current = trace.get_tracer_provider()
        if isinstance(current, ReplaySafeTracerProvider):
            provider = current
            if exporter is not None:
                provider.add_span_processor(_guarded(SimpleSpanProcessor(exporter)))
            elif not _configured:
                provider.add_span_processor(
                    _guarded(BatchSpanProcessor(build_span_exporter(settings)))
                )
        elif isinstance(current, trace.ProxyTracerProvider):  # nothing installed yet
            provider = build_tracer_provider(settings, exporter)
            trace.set_tracer_provider(provider)
        else:
            raise TelemetryUnavailableError(
                f"a global OpenTelemetry tracer provider ({type(current).__name__}) is already "
                "installed; Temporal's OpenTelemetryPlugin needs one made by "
                "temporalio.contrib.opentelemetry.create_tracer_provider(). Install that one "
                "instead (its spans go to the exporters you add), or set AGENT_OTEL=off."
            )
        _configured = True
        context_log = logging.getLogger("opentelemetry.context")
        if _DETACH_FILTER not in context_log.filters:
            context_log.addFilter(_DETACH_FILTER)
    return provider


def temporal_plugins(settings: Settings, existing: Sequence[Any] = ()) -> list[SimplePlugin]:
    """Plugins :func:`workers.client.connect` adds to the client: the tracing one, or none.

    Configures tracing (see :func:`configure_tracing`) when ``AGENT_OTEL`` asks for it. Returns
    ``[]`` when tracing is off or ``existing`` already holds an ``OpenTelemetryPlugin``.

    Raises:
        TelemetryUnavailableError: as :func:`configure_tracing`.
    """
    if not tracing_requested(settings):
        return []
    configure_tracing(settings)
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin

    if any(isinstance(p, OpenTelemetryPlugin) for p in existing):
        return []
    return [OpenTelemetryPlugin(add_temporal_spans=True)]


def flush_tracing(timeout_seconds: float = 5.0) -> bool:
    """Export the spans still buffered (e.g. before a worker process exits); True if all went.

    A no-op returning True when OpenTelemetry was never imported. Buffered spans are also flushed
    at interpreter exit by the provider itself.
    """
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return True
    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    return bool(flush(int(timeout_seconds * 1000))) if flush is not None else True


# ------------------------------------------------------------------ structlog processors


def add_activity_context(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Add ``run_id``, ``activity`` and ``attempt`` to structlog events inside an activity.

    A structlog processor. ``run_id`` is the workflow id (the run's id across continue-as-new).
    Values the event already has (e.g. bound by the activity) are kept.
    """
    if activity.in_activity():
        info = activity.info()
        if info.workflow_id:
            event_dict.setdefault("run_id", info.workflow_id)
        event_dict.setdefault("activity", info.activity_type)
        event_dict.setdefault("attempt", info.attempt)
    return event_dict


def add_trace_ids(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """Add the current OpenTelemetry ``trace_id`` and ``span_id`` (hex) to structlog events.

    A structlog processor. Costs one dictionary lookup when OpenTelemetry was never imported
    (tracing off); adds nothing when no span is current.
    """
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return event_dict
    ctx = trace.get_current_span().get_span_context()
    if ctx.is_valid:
        event_dict.setdefault("trace_id", format(ctx.trace_id, "032x"))
        event_dict.setdefault("span_id", format(ctx.span_id, "016x"))
    return event_dict
