"""The attempt limit sized from a model server's measured speed (activities/model_pace.py)."""

from __future__ import annotations

import math

import pytest

from activities.model_pace import SAFETY, SLACK_SECONDS, Pace, Speed, speed_of

LLAMA_TIMINGS = {  # a llama.cpp reply's `timings` (tools/server), 2 cores, prompt partly cached
    "cache_n": 1200,
    "prompt_n": 4862,
    "prompt_ms": 49_000.0,
    "prompt_per_second": 99.2,
    "predicted_n": 180,
    "predicted_ms": 12_000.0,
    "predicted_per_second": 15.0,
}


def test_speed_of_reads_llama_cpp_timings():
    assert speed_of(LLAMA_TIMINGS) == Speed(99.2, 15.0)


@pytest.mark.parametrize(
    "timings",
    [
        None,
        "fast",
        {},
        {"prompt_n": 10, "prompt_per_second": 500.0, "predicted_n": 2, "predicted_per_second": 9.0},
        {"prompt_n": 900, "prompt_per_second": math.inf},
        {"prompt_n": 900, "prompt_per_second": -3.0},
        {"prompt_n": "900", "prompt_per_second": 80.0},
    ],
)
def test_speed_of_ignores_what_says_nothing(timings):
    assert speed_of(timings) is None


def test_speed_of_keeps_the_half_it_can_read():
    only_prompt = {"prompt_n": 900, "prompt_per_second": 80.0, "predicted_n": 1}
    assert speed_of(only_prompt) == Speed(80.0, None)


def test_no_limit_until_both_speeds_are_known():
    pace = Pace()
    assert pace.limit("m", 8192, 512) is None
    pace.observe("m", Speed(100.0, None))
    assert pace.limit("m", 8192, 512) is None
    pace.observe("m", Speed(None, 20.0))
    seconds, why = pace.limit("m", 8192, 512) or (0.0, "")
    assert seconds == pytest.approx(SAFETY * (8192 / 100 + 512 / 20) + SLACK_SECONDS)
    assert "8192-token prompt at 100 tokens/s" in why and "20.0 tokens/s" in why


def test_the_slowest_recent_speed_sizes_the_limit_per_model():
    pace = Pace()
    for prompt, gen in [(300.0, 30.0), (80.0, 25.0), (250.0, 12.0)]:
        pace.observe("slow", Speed(prompt, gen))
    pace.observe("fast", Speed(5000.0, 200.0))
    slow = pace.limit("slow", 4096, 256)
    fast = pace.limit("fast", 4096, 256)
    assert slow is not None and fast is not None
    assert slow[0] == pytest.approx(SAFETY * (4096 / 80 + 256 / 12) + SLACK_SECONDS)
    assert fast[0] < slow[0]


def test_old_measurements_age_out():
    pace = Pace()
    pace.observe("m", Speed(10.0, 1.0))  # one slow reply long ago
    for _ in range(20):
        pace.observe("m", Speed(100.0, 20.0))
    limit = pace.limit("m", 1000, 100)
    assert limit is not None
    assert limit[0] == pytest.approx(SAFETY * (1000 / 100 + 100 / 20) + SLACK_SECONDS)
