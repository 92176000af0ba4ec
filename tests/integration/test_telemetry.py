"""Telemetry: OpenTelemetry spans of a run (workers/telemetry.py) and run-scoped structlog events.

The OpenTelemetry packages are test dependencies: the tests that need them import them in their
body, so a missing package fails those tests (it does not skip them) and leaves the others
running.
"""

from __future__ import annotations

import asyncio
import gc
import io
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import structlog
from temporalio.client import Client

from tests.support.harness import Harness
from tests.support.spans import span_context, span_end, span_start
from workers import client as rc
from workers import telemetry
from workers.config import PROJECT_ROOT, Settings, load_settings
from workers.logging_setup import configure_logging
from workers.testing.scripted_model import ScriptedModel, text, tool_call
from workflows.models import RunRequest, RunState

ACTIVITY_EVENTS = ("model_step", "tool_call")


@pytest.fixture
def json_logs() -> Iterator[io.StringIO]:
    """structlog and stdlib logging as JSON lines into a StringIO; the previous setup is restored."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging("info", stream=stream)
    try:
        yield stream
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)


def events(stream: io.StringIO, *names: str) -> list[dict[str, Any]]:
    out = []
    for line in stream.getvalue().splitlines():
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not names or ev.get("event") in names:
            out.append(ev)
    return out


def traced_settings(tmp_path: Path, address: str, otel: str = "console") -> Settings:
    return Settings(
        temporal_address=address,
        otel=otel,  # pyright: ignore[reportArgumentType] - a str on purpose: Settings validates it
        payload_store="none",
        state_dir=str(tmp_path / "state"),
    )


def readme_model() -> ScriptedModel:
    return ScriptedModel([tool_call("read_file", {"path": "README.md"}), text("the answer is 42")])


# ------------------------------------------------------------------ OpenTelemetry spans


async def test_a_traced_run_has_workflow_and_activity_spans_in_one_trace(
    tmp_path: Path, dev_server_address: str, json_logs: io.StringIO
):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from temporalio.contrib.opentelemetry import OpenTelemetryPlugin

    memory = InMemorySpanExporter()
    provider = telemetry.configure_tracing(exporter=memory)
    assert provider is not None
    # connect() with AGENT_OTEL set adds the plugin; the worker built from the client inherits it
    traced = await rc.connect(
        traced_settings(tmp_path, dev_server_address), target_host=dev_server_address
    )
    assert [type(p) for p in traced.config()["plugins"]] == [OpenTelemetryPlugin]

    async with Harness(traced, tmp_path, readme_model()) as h:
        handle = await h.start("read the readme", tenant_id="acme", principal_id="alice")
        res = await asyncio.wait_for(handle.result(), timeout=60)
    assert res.status == "completed"

    run_spans = [
        s
        for s in memory.get_finished_spans()
        if (s.attributes or {}).get("temporalWorkflowID") == handle.id
    ]
    by_name: dict[str, list[Any]] = {}
    for s in run_spans:
        by_name.setdefault(s.name, []).append(s)
    for name in (
        "StartWorkflow:AgentRun",
        "RunWorkflow:AgentRun",
        "RunActivity:spec.resolve",
        "StartActivity:model.complete",
        "RunActivity:model.complete",
        "RunTool:read_file",
    ):
        assert name in by_name, f"no span {name}; got {sorted(by_name)}"
    assert len(by_name["RunActivity:model.complete"]) == 2  # two model steps
    # read_file (local) ran inside the second step's activity (workflows/model_step.py, ToolsFirst)
    (tool_span,) = by_name["RunTool:read_file"]
    assert (tool_span.attributes or {}).get("toolCallID") == res.tool_calls[0].id

    # one trace, rooted at the client's StartWorkflow span
    trace_ids = {span_context(s).trace_id for s in run_spans}
    assert len(trace_ids) == 1
    (root,) = by_name["StartWorkflow:AgentRun"]
    assert root.parent is None
    spans_by_id = {span_context(s).span_id: s for s in run_spans}

    def ancestors(span: Any) -> list[str]:
        names = []
        while span.parent is not None:
            span = spans_by_id[span.parent.span_id]  # KeyError: a parent outside the run's spans
            names.append(span.name)
        return names

    (wf,) = by_name["RunWorkflow:AgentRun"]
    assert ancestors(wf) == ["StartWorkflow:AgentRun"]
    for act in by_name["RunActivity:model.complete"]:
        chain = ancestors(act)
        assert chain[-2:] == ["RunWorkflow:AgentRun", "StartWorkflow:AgentRun"], chain
        assert chain[0].startswith("StartActivity:")
    assert ancestors(tool_span)[:2] == [
        "RunActivity:model.complete",
        "StartActivity:model.complete",
    ]
    assert ancestors(tool_span)[-2:] == ["RunWorkflow:AgentRun", "StartWorkflow:AgentRun"]
    # the plugin's workflow span lasts as long as the run (the legacy interceptor's last 0 ns)
    assert wf.end_time > wf.start_time
    assert wf.end_time >= tool_span.end_time
    assert all(s.resource.attributes.get("service.name") == "agent-runtime" for s in run_spans)

    # the activities' structlog events carry the OpenTelemetry ids of their RunActivity span
    trace_hex = format(trace_ids.pop(), "032x")
    model_spans = {format(s.context.span_id, "016x") for s in by_name["RunActivity:model.complete"]}
    steps = [e for e in events(json_logs, "model_step") if e.get("run_id") == handle.id]
    calls = [e for e in events(json_logs, "tool_call") if e.get("run_id") == handle.id]
    assert len(steps) == 2 and len(calls) == 1
    assert all(e["trace_id"] == trace_hex for e in steps + calls)
    assert {e["span_id"] for e in steps} == model_spans
    assert calls[0]["span_id"] == format(tool_span.context.span_id, "016x")


async def test_a_run_started_without_a_client_span_still_gets_one_trace(
    client: Client, tmp_path: Path, dev_server_address: str
):
    """Runs started by the CLI or the Web UI have no client span: the worker's spans still link."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    telemetry.configure_tracing(exporter=memory)
    traced = await rc.connect(
        traced_settings(tmp_path, dev_server_address), target_host=dev_server_address
    )
    async with Harness(traced, tmp_path, readme_model()) as h:
        # started through the untraced fixture client: no StartWorkflow span, no trace header
        handle = await rc.start_run(
            client, RunRequest(input="read the readme"), task_queue=h.task_queue
        )
        res = await asyncio.wait_for(handle.result(), timeout=60)
    assert res.status == "completed"
    spans = [
        s
        for s in memory.get_finished_spans()
        if (s.attributes or {}).get("temporalWorkflowID") == handle.id
    ]
    names = {s.name for s in spans}
    assert "StartWorkflow:AgentRun" not in names
    assert {
        "RunWorkflow:AgentRun",
        "RunActivity:model.complete",
        "RunTool:read_file",
    } <= names
    assert len({span_context(s).trace_id for s in spans}) == 1
    (wf,) = [s for s in spans if s.name == "RunWorkflow:AgentRun"]
    assert wf.parent is None


async def test_a_worker_restart_mid_run_keeps_one_workflow_span(
    tmp_path: Path, dev_server_address: str, caplog: pytest.LogCaptureFixture
):
    """The replaying worker re-creates the run's span with the same ids: no orphans, no duplicates."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    telemetry.configure_tracing(exporter=memory)
    traced = await rc.connect(
        traced_settings(tmp_path, dev_server_address), target_host=dev_server_address
    )
    model = ScriptedModel([tool_call("deploy", {"target": "prod"}), text("deployed")])
    gated = {"default": {"policy": {"approvers": ["alice"]}}}  # deploy is a write tool: approval
    async with Harness(traced, tmp_path, model, agents=gated) as h:
        handle = await h.start("deploy it")
        st = await until_awaiting_approval(handle)
        await h.stop_worker()
        gc.collect()  # the stopped worker's cached run is dropped here (see workers/telemetry.py)
        await h.start_worker()  # rebuilds the run from its history
        await rc.decide(traced, handle.id, st.pending_approvals[0].tool_call_id, "approve", "alice")
        res = await asyncio.wait_for(handle.result(), timeout=60)
    assert res.status == "completed" and res.tool_calls[0].status == "ok"
    spans = [
        s
        for s in memory.get_finished_spans()
        if (s.attributes or {}).get("temporalWorkflowID") == handle.id
        and s.name.split(":")[0] in ("StartWorkflow", "RunWorkflow", "StartActivity", "RunActivity")
    ]  # queries and the update are traces of their own
    names = [s.name for s in spans]
    assert names.count("RunWorkflow:AgentRun") == 1
    assert (
        names.count("RunActivity:model.complete") == 2
        and names.count("StartActivity:model.complete") == 2
    )
    assert names.count("RunActivity:tool.invoke") == 1
    assert len({span_context(s).trace_id for s in spans}) == 1
    ids = {span_context(s).span_id for s in spans}
    # every parent was exported
    assert all(s.parent is None or s.parent.span_id in ids for s in spans)
    (wf,) = [s for s in spans if s.name == "RunWorkflow:AgentRun"]
    (tool_run,) = [s for s in spans if s.name == "RunActivity:tool.invoke"]
    assert span_start(wf) < span_start(tool_run) < span_end(wf)  # the span covers the whole run
    assert not [r for r in caplog.records if r.getMessage() == "Failed to detach context"]


async def until_awaiting_approval(handle: Any) -> RunState:
    for _ in range(400):
        try:
            st = await handle.query("state", result_type=RunState)
            if st.status == "awaiting_approval" and st.pending_approvals:
                return st
        except Exception:  # noqa: BLE001 - query before the first workflow task
            pass
        await asyncio.sleep(0.05)
    raise AssertionError("the run never waited for approval")


async def test_connect_without_telemetry_adds_no_plugin_and_imports_no_opentelemetry(
    dev_server_address: str, tmp_path: Path
):
    code = (
        "import asyncio, gc, sys\n"
        "from workers import client as rc\n"
        "from workers.config import Settings\n"
        "from workers.logging_setup import configure_logging\n"
        "configure_logging('info')\n"
        f"s = Settings(temporal_address={dev_server_address!r}, payload_store='none', state_dir={str(tmp_path)!r})\n"
        "async def main():\n"
        f"    c = await rc.connect(s, target_host={dev_server_address!r})\n"
        "    n = len(c.config()['plugins'])\n"
        "    del c\n"  # no client may outlive its event loop (notes/temporal.md: crash at exit)
        "    gc.collect()\n"
        "    return n\n"
        "n = asyncio.run(main())\n"
        "print(n, any(m.startswith('opentelemetry') for m in sys.modules))\n"
    )
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PROJECT_ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "False"]


async def test_telemetry_requested_without_the_packages_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, dev_server_address: str
):
    # a None entry in sys.modules makes `import` of that module raise ImportError
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    settings = traced_settings(tmp_path, dev_server_address, otel="otlp")
    with pytest.raises(telemetry.TelemetryUnavailableError) as exc:
        telemetry.build_span_exporter(settings)
    msg = str(exc.value)
    assert "AGENT_OTEL=otlp" in msg and "pip install 'temporal-agent-runtime[otel]'" in msg
    assert "opentelemetry-exporter-otlp-proto-http" in msg
    # connect() reports it as such, not as an unreachable server
    with pytest.raises(telemetry.TelemetryUnavailableError):
        await rc.connect(settings, target_host=dev_server_address)


def test_otel_settings_come_from_the_standard_variables(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("AGENT_OTEL", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "agents-prod")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    s = load_settings()
    assert (s.otel, s.otel_endpoint, s.otel_service_name) == (
        "otlp",
        "http://collector:4318/",
        "agents-prod",
    )
    assert telemetry.tracing_requested(s)
    assert telemetry.otlp_traces_endpoint(s) == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/api/spans")
    assert telemetry.otlp_traces_endpoint(load_settings()) == "https://traces.example/api/spans"
    monkeypatch.setenv("AGENT_OTEL", "jaeger")
    with pytest.raises(ValueError, match="otel"):
        load_settings()
    monkeypatch.delenv("AGENT_OTEL")
    assert not telemetry.tracing_requested(load_settings())  # off by default


def test_otlp_exporter_posts_spans_with_the_service_name_to_the_endpoint():
    received: list[tuple[str, str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            received.append((self.path, self.headers.get("Content-Type", ""), body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        settings = Settings(
            otel="otlp",
            otel_endpoint=f"http://127.0.0.1:{server.server_port}",
            otel_service_name="svc-under-test",
        )
        provider = telemetry.build_tracer_provider(settings)  # not installed globally
        with provider.get_tracer("test").start_as_current_span("hello-span"):
            pass
        assert provider.force_flush(10_000)
        provider.shutdown()
    finally:
        server.shutdown()
    assert len(received) >= 1
    path, ctype, body = received[0]
    assert path == "/v1/traces" and ctype == "application/x-protobuf"
    assert b"svc-under-test" in body and b"hello-span" in body


# ------------------------------------------------------------------ structlog events of activities


async def test_activity_log_events_carry_run_id_turn_tool_and_tenant(
    client: Client, tmp_path: Path, json_logs: io.StringIO
):
    async with Harness(client, tmp_path, readme_model()) as h:
        handle = await h.start("read the readme", tenant_id="acme", principal_id="alice")
        res = await asyncio.wait_for(handle.result(), timeout=60)
    assert res.status == "completed"
    mine = [e for e in events(json_logs, *ACTIVITY_EVENTS) if e.get("run_id") == handle.id]
    steps = [e for e in mine if e["event"] == "model_step"]
    calls = [e for e in mine if e["event"] == "tool_call"]
    assert [e["turn"] for e in steps] == [1, 2]
    assert len(calls) == 1
    for e in steps:
        assert e["tenant_id"] == "acme" and e["activity"] == "model.complete" and e["attempt"] == 1
        assert e["model"] == "scripted"
        assert e["latency_ms"] >= 0 and e["prompt_tokens"] > 0 and e["completion_tokens"] > 0
        assert e["level"] == "info" and "timestamp" in e
    assert steps[0]["tool_calls"] == ["read_file"] and steps[1]["tool_calls"] == []
    call = calls[0]
    assert call["turn"] == 1 and call["tool"] == "read_file" and call["tenant_id"] == "acme"
    assert call["status"] == "ok" and call["duration_ms"] >= 0 and call["output_chars"] > 0
    # read_file (local) ran inside the next model step's activity (workflows/model_step.py, ToolsFirst)
    assert call["activity"] == "model.complete" and call["in_model_step"] is True
    assert call["call_id"] == res.tool_calls[0].id
    # this client has no tracing plugin: no OpenTelemetry ids are made up
    assert not any("trace_id" in e or "span_id" in e for e in mine)
    # the token counts logged add up to the run's usage
    assert sum(e["prompt_tokens"] + e["completion_tokens"] for e in steps) == res.usage.total_tokens


def test_processors_leave_events_outside_activities_and_spans_alone():
    ev = telemetry.add_trace_ids(
        None, "info", telemetry.add_activity_context(None, "info", {"event": "x"})
    )
    assert ev == {"event": "x"}
