"""The runtime's own Prometheus series, counted where the facts are known (activities).

Definitions and one recording function per fact; the activities call these (a line each) and
:mod:`workers.metrics_server` serves them, with the Temporal SDK's own series, as ``GET /metrics``
when ``AGENT_METRICS_ADDRESS`` is set. Counting costs a dictionary lookup and a lock per series
whether or not anything serves them (prometheus_client's default registry, process-wide).

Series (docs/deploying.md lists them with the SDK's):

* ``agent_model_steps_total{tenant, model, outcome}``: model steps (``model.complete`` attempts)
  by outcome ``ok``, ``error`` (classified, Temporal retries it or not) or ``cancelled``.
* ``agent_model_tokens_total{tenant, model, kind}``: tokens of the steps that answered, ``kind``
  ``prompt`` or ``completion``.
* ``agent_model_cost_usd_total{tenant, model}``: their cost in US dollars (the spec's prices).
* ``agent_model_step_seconds{model}``: a histogram of the time of steps that answered.
* ``agent_tool_calls_total{tool, outcome}``: tool calls (``tool.invoke`` and calls run inside a
  model step) by outcome ``ok``, ``error`` (a business error the model reads),
  ``infrastructure_error`` (raised: Temporal retries it), ``timed_out`` or ``cancelled``.
* ``agent_tool_call_seconds{tool}``: a histogram of the time of calls that returned.
* ``agent_sandbox_seconds_total{tenant, tool}``: wall-clock seconds programs ran in the sandbox
  (``run_python``, ``run_command``), from the backend's own measure.
* ``agent_sandbox_runs_total{tool, outcome}``: those programs by outcome ``ok`` (exit 0),
  ``exit_nonzero``, ``timed_out`` or ``oom``.

Labels are bounded: never a run or call id. Tenants, models and tools come from clients and
specs, so each label keeps the first :data:`MAX_LABEL_VALUES` values it sees in this process and
reports any later one as ``other`` (a client starting runs for a million tenants, or a model
calling made-up tools, cannot blow up the series).
"""

from __future__ import annotations

import threading

from prometheus_client import Counter, Histogram

from activities.contracts import Usage
from activities.sandbox.backend import SandboxResult

__all__ = [
    "MAX_LABEL_VALUES",
    "MODEL_COST",
    "MODEL_STEPS",
    "MODEL_STEP_SECONDS",
    "MODEL_TOKENS",
    "OTHER",
    "SANDBOX_RUNS",
    "SANDBOX_SECONDS",
    "TOOL_CALLS",
    "TOOL_CALL_SECONDS",
    "model_step",
    "model_step_failed",
    "sandbox_run",
    "tool_call",
]

MAX_LABEL_VALUES = 200
"""Distinct values one label (tenant, model or tool) keeps per process; later ones are ``other``."""
OTHER = "other"

MODEL_STEPS = Counter(
    "agent_model_steps",
    "Model steps (model.complete attempts) by tenant, model and outcome (ok, error, cancelled).",
    ["tenant", "model", "outcome"],
)
MODEL_TOKENS = Counter(
    "agent_model_tokens",
    "Tokens of the model steps that answered, by tenant, model and kind (prompt, completion).",
    ["tenant", "model", "kind"],
)
MODEL_COST = Counter(
    "agent_model_cost_usd",
    "Cost in US dollars of the model steps that answered (the spec's prices), by tenant and model.",
    ["tenant", "model"],
)
MODEL_STEP_SECONDS = Histogram(
    "agent_model_step_seconds",
    "Seconds of the model steps that answered, by model.",
    ["model"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320),
)
TOOL_CALLS = Counter(
    "agent_tool_calls",
    "Tool calls by tool and outcome (ok, error, infrastructure_error, timed_out, cancelled).",
    ["tool", "outcome"],
)
TOOL_CALL_SECONDS = Histogram(
    "agent_tool_call_seconds",
    "Seconds of the tool calls that returned an outcome, by tool.",
    ["tool"],
    buckets=(0.005, 0.025, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 150, 300),
)
SANDBOX_SECONDS = Counter(
    "agent_sandbox_seconds",
    "Wall-clock seconds programs ran in the sandbox, by tenant and tool.",
    ["tenant", "tool"],
)
SANDBOX_RUNS = Counter(
    "agent_sandbox_runs",
    "Programs run in the sandbox, by tool and outcome (ok, exit_nonzero, timed_out, oom).",
    ["tool", "outcome"],
)


class _Bounded:
    """The first ``limit`` distinct values of one label; any later value reads ``other``."""

    def __init__(self, limit: int = MAX_LABEL_VALUES) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str | None) -> str:
        value = value or "none"
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) >= self._limit:
                return OTHER
            self._seen.add(value)
        return value


_tenant, _model, _tool = _Bounded(), _Bounded(), _Bounded()


def model_step(tenant: str, model: str, usage: Usage, ms: float) -> None:
    """Count a model step that answered: its tokens and cost, its time (``ms`` milliseconds)."""
    t, m = _tenant(tenant), _model(model)
    MODEL_STEPS.labels(t, m, "ok").inc()
    MODEL_TOKENS.labels(t, m, "prompt").inc(max(0, usage.prompt_tokens))
    MODEL_TOKENS.labels(t, m, "completion").inc(max(0, usage.completion_tokens))
    MODEL_COST.labels(t, m).inc(max(0.0, usage.cost_usd))
    MODEL_STEP_SECONDS.labels(m).observe(max(0.0, ms) / 1000)


def model_step_failed(tenant: str, model: str, cancelled: bool = False) -> None:
    """Count a model step that raised (``error``) or was cancelled."""
    MODEL_STEPS.labels(_tenant(tenant), _model(model), "cancelled" if cancelled else "error").inc()


def tool_call(tool: str, outcome: str, ms: float | None = None) -> None:
    """Count a tool call ending with ``outcome``; ``ms``: its time, when it returned one."""
    name = _tool(tool)
    TOOL_CALLS.labels(name, outcome).inc()
    if ms is not None:
        TOOL_CALL_SECONDS.labels(name).observe(max(0.0, ms) / 1000)


def sandbox_run(tenant: str, tool: str, result: SandboxResult) -> None:
    """Count a program the sandbox ran: its seconds and how it ended."""
    name = _tool(tool)
    SANDBOX_SECONDS.labels(_tenant(tenant), name).inc(max(0.0, result.duration_ms) / 1000)
    if result.timed_out:
        outcome = "timed_out"
    elif result.oom:
        outcome = "oom"
    else:
        outcome = "ok" if result.exit_code == 0 else "exit_nonzero"
    SANDBOX_RUNS.labels(name, outcome).inc()
