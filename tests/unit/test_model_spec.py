"""Spec parsing of model fallbacks and rate limits; the pinned spec of older runs still decodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from activities.contracts import model_task_queue
from activities.spec import AgentSpec, PinnedSpec, SpecError, load_rate_limits, resolve_agent
from workers.config import Settings
from workers.worker import model_rate_limits


def _write(tmp_path: Path, body: dict) -> Path:
    p = tmp_path / "agents.yml"
    p.write_text(yaml.safe_dump(body))
    return p


def test_model_list_splits_into_primary_and_fallbacks(tmp_path: Path) -> None:
    p = _write(tmp_path, {"agents": {"a": {"model": ["m1", "m2", "m3"]}}})
    spec = resolve_agent(p, "a", "default-model")
    assert spec.model == "m1"
    assert spec.fallback_models == ["m2", "m3"]
    assert spec.models() == ["m1", "m2", "m3"]


def test_model_string_has_no_fallbacks(tmp_path: Path) -> None:
    spec = resolve_agent(_write(tmp_path, {"agents": {"a": {"model": "m1"}}}), "a", "d")
    assert (spec.model, spec.fallback_models, spec.rate_limits) == ("m1", [], {})


@pytest.mark.parametrize(
    ("model", "needle"),
    [([], "one or more"), (["m1", ""], "non-empty"), (["m1", "m1"], "twice"), ([3], "non-empty")],
)
def test_bad_model_list_names_the_field(tmp_path: Path, model: object, needle: str) -> None:
    with pytest.raises(SpecError) as e:
        resolve_agent(_write(tmp_path, {"agents": {"a": {"model": model}}}), "a", "d")
    assert "agents.a" in str(e.value) and "model" in str(e.value) and needle in str(e.value)


def test_rate_limits_are_read_from_the_top_level(tmp_path: Path) -> None:
    body = {
        "rate_limits": {"m1": {"requests_per_second": 2.5}},
        "agents": {"a": {"model": ["m1", "m2"]}},
    }
    spec = resolve_agent(_write(tmp_path, body), "a", "d")
    assert spec.rate_limits["m1"].requests_per_second == 2.5
    assert "m2" not in spec.rate_limits


@pytest.mark.parametrize(
    ("section", "needle"),
    [
        ({"m1": {"requests_per_second": 0}}, "rate_limits.m1.requests_per_second"),
        ({"m1": {"rps": 3}}, "rate_limits.m1.rps"),
        ({"m1": 3}, "rate_limits.m1"),
        ([1, 2], "rate_limits: must be a mapping"),
    ],
)
def test_bad_rate_limits_name_the_field(tmp_path: Path, section: object, needle: str) -> None:
    p = _write(tmp_path, {"rate_limits": section, "agents": {"a": {}}})
    with pytest.raises(SpecError) as e:
        resolve_agent(p, "a", "d")
    assert needle in str(e.value)


def test_rate_limits_inside_an_agent_are_refused(tmp_path: Path) -> None:
    body = {"agents": {"a": {"rate_limits": {"m1": {"requests_per_second": 1}}}}}
    with pytest.raises(SpecError, match=r"agents\.a\.rate_limits: .*top level"):
        resolve_agent(_write(tmp_path, body), "a", "d")


def test_pinned_spec_of_an_older_run_still_decodes() -> None:
    """A pinned spec recorded before fallbacks and rate limits (no such fields) decodes as is."""
    old = {
        "spec": {"name": "default", "model": "scripted", "tools": ["read_file"]},
        "tools": [],
        "spec_hash": "abc",
        "source": "agents.yml",
    }
    pinned = PinnedSpec.model_validate_json(PinnedSpec.model_validate(old).model_dump_json())
    assert pinned.spec.model == "scripted"
    assert pinned.spec.models() == ["scripted"]
    assert pinned.spec.rate_limits == {}
    dumped = AgentSpec.model_validate({"name": "a", "model": ["x", "y"]}).model_dump(mode="json")
    assert dumped["model"] == "x" and dumped["fallback_models"] == ["y"]


def test_load_rate_limits_without_a_section() -> None:
    assert load_rate_limits({"agents": {}}) == {}


def test_worker_reads_the_rate_limits_of_its_spec_file(tmp_path: Path) -> None:
    """The worker learns the limits from its spec file; each model gets its own queue name."""
    body = {
        "rate_limits": {"m1": {"requests_per_second": 2}, "m/2": {"requests_per_second": 0.5}},
        "agents": {"a": {}},
    }
    settings = Settings(spec_file=str(_write(tmp_path, body)), task_queue="tq")
    assert model_rate_limits(settings) == {"m1": 2.0, "m/2": 0.5}
    assert model_task_queue("tq", "m1") == "tq.model.m1"
    broken = Settings(spec_file=str(tmp_path / "missing.yml"), task_queue="tq")
    assert model_rate_limits(broken) == {}
