"""activities/metrics.py and workers/metrics_server.py without a server: labels, health, settings."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError

from activities import metrics
from activities.contracts import Usage
from activities.sandbox.backend import SandboxResult
from workers.config import Settings
from workers.metrics_server import Health, split_address


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_label_keeps_its_first_values_then_says_other():
    bounded = metrics._Bounded(limit=2)  # noqa: SLF001
    assert [bounded(v) for v in ["a", "b", "c", "a", None, "b"]] == [
        "a",
        "b",
        "other",
        "a",
        "other",
        "b",
    ]


def test_a_model_step_counts_its_tokens_cost_and_time():
    before = sample("agent_model_tokens_total", tenant="t-unit", model="m-unit", kind="prompt")
    usage = Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15, cost_usd=0.25)
    metrics.model_step("t-unit", "m-unit", usage, 1500.0)
    metrics.model_step_failed("t-unit", "m-unit")
    metrics.model_step_failed("t-unit", "m-unit", cancelled=True)
    labels = {"tenant": "t-unit", "model": "m-unit"}
    assert sample("agent_model_tokens_total", kind="prompt", **labels) == before + 10
    assert sample("agent_model_tokens_total", kind="completion", **labels) >= 5
    assert sample("agent_model_cost_usd_total", **labels) >= 0.25
    assert sample("agent_model_steps_total", outcome="error", **labels) >= 1
    assert sample("agent_model_steps_total", outcome="cancelled", **labels) >= 1
    assert sample("agent_model_step_seconds_sum", model="m-unit") >= 1.5


def test_sandbox_outcomes():
    def run(**kw: Any) -> SandboxResult:
        base: dict[str, Any] = dict(exit_code=0, stdout="", stderr="", truncated=False,
                                    duration_ms=500.0, timed_out=False, oom=False)  # fmt: skip
        return SandboxResult(**{**base, **kw})

    for result in [run(), run(exit_code=1), run(timed_out=True, exit_code=-9), run(oom=True)]:
        metrics.sandbox_run("t-sb", "tool-sb", result)
    for outcome in ["ok", "exit_nonzero", "timed_out", "oom"]:
        assert sample("agent_sandbox_runs_total", tool="tool-sb", outcome=outcome) >= 1
    assert sample("agent_sandbox_seconds_total", tenant="t-sb", tool="tool-sb") >= 2.0


class _Worker:
    def __init__(self, queue: str, running: bool = True) -> None:
        self.task_queue, self.is_running = queue, running


def test_health_is_ready_only_while_every_worker_polls():
    h = Health()
    assert h.answer() == (503, {"status": "starting"})
    a, b = _Worker("q"), _Worker("q.eval")
    h.polling([a, b])  # type: ignore[list-item]
    assert h.answer() == (200, {"status": "polling", "task_queues": ["q", "q.eval"]})
    b.is_running = False  # a worker that failed for good
    assert h.answer() == (503, {"status": "not_polling", "task_queues": ["q.eval"]})
    h.phase = "stopping"
    assert h.answer() == (503, {"status": "stopping"})
    h.phase = "serving"
    assert h.answer() == (200, {"status": "serving"})


@pytest.mark.parametrize(
    ("address", "parsed"),
    [("0.0.0.0:9464", ("0.0.0.0", 9464)), ("[::1]:9464", ("::1", 9464)), (":9464", (None, 9464))],
)
def test_addresses(address: str, parsed: tuple[str | None, int]):
    assert split_address(address) == parsed
    assert Settings(metrics_address=address).metrics_address == address


@pytest.mark.parametrize("bad", ["9464", "host:", "host:http", "h:70000"])
def test_a_bad_metrics_address_is_refused(bad: str):
    with pytest.raises(ValidationError, match="host:port"):
        Settings(metrics_address=bad)


def test_a_hostile_tenant_name_stays_one_label_value():
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    evil = 'evil"} agent_model_cost_usd_total 1e9\n# x'
    metrics.model_step(evil, "m-evil", Usage(prompt_tokens=1), 1.0)
    text = generate_latest(REGISTRY).decode()
    tenants = {
        s.labels.get("tenant")
        for f in text_string_to_metric_families(text)
        if f.name == "agent_model_tokens"
        for s in f.samples
    }
    assert evil in tenants
    cost = [
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == "agent_model_cost_usd"
        for s in f.samples
    ]
    assert cost and max(cost) < 1e9
