"""How long one model attempt may take, sized from the model server's own measured speed.

A long prompt on a small CPU is slow, not stalled: llama.cpp processed a 6,062-token prompt in
61 s on 2 cores (issue #35), and the old fixed start-to-close of 120 s killed that step while it
was generating, so its retry paid the prompt again. Here the attempt's own limit follows the work:

* Temporal's start-to-close of a model attempt is a backstop (the spec's
  ``model_timeout_seconds``, 600 s by default); a worker that dies is noticed by its heartbeats
  within seconds, whatever that backstop is.
* A server that reports its speed (llama.cpp's ``timings``: ``prompt_per_second`` counts only the
  prompt tokens it processed, not those served from its prompt cache; ``predicted_per_second`` the
  generated ones) gives the attempt a limit of :data:`SAFETY` times what the largest request the
  model takes would need at the slowest speed it showed lately (the context window's prompt, then
  ``max_tokens`` generated), plus :data:`SLACK_SECONDS` for a request queued behind another.
  That limit names what it was sized from when it ends an attempt.
* A server that reports no speed (OpenAI, most hosted endpoints) keeps the backstop alone: a
  rate derived from ``usage`` and wall time would count prompt-cached tokens as processed and
  could size the limit far too short for an uncached prompt.

Per worker process, per model name; nothing is recorded in the run's history.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

SAFETY = 3.0
"""Multiplier over the time the largest request would take at the slowest recent speed."""
SLACK_SECONDS = 30.0
"""Seconds added for a request that waits for the server's slot behind another."""
MIN_PROMPT_TOKENS = 64
"""A reply whose processed prompt was shorter than this says little of the prompt rate (fixed
costs dominate) and is not taken as a measurement of it."""
MIN_GENERATED_TOKENS = 8
"""Likewise for the generation rate."""
RECENT = 8
"""Measurements kept per model; the slowest of them sizes the limit."""
DEFAULT_WINDOW_TOKENS = 32_768
"""The window assumed when a step names none (the spec's ``compaction.context_window`` default)."""


@dataclass(frozen=True)
class Speed:
    """One reply's speed as the server measured it (tokens per second), either may be None."""

    prompt_per_second: float | None
    generated_per_second: float | None


def speed_of(timings: object) -> Speed | None:
    """The :class:`Speed` in a llama.cpp ``timings`` object, or None when it carries none.

    ``timings`` is the reply's (non-streamed) or its last chunk's (streamed) ``timings`` field:
    ``{"prompt_n", "prompt_per_second", "predicted_n", "predicted_per_second", "cache_n", ...}``
    (llama.cpp ``tools/server``). Values that are missing, not finite and positive, or measured on
    fewer than :data:`MIN_PROMPT_TOKENS` / :data:`MIN_GENERATED_TOKENS` tokens are left out.
    """
    if not isinstance(timings, Mapping):
        return None
    fields = cast("Mapping[str, Any]", timings)
    prompt = _rate(fields, "prompt_n", "prompt_per_second", MIN_PROMPT_TOKENS)
    generated = _rate(fields, "predicted_n", "predicted_per_second", MIN_GENERATED_TOKENS)
    if prompt is None and generated is None:
        return None
    return Speed(prompt, generated)


def _rate(fields: Mapping[str, Any], count_key: str, rate_key: str, least: int) -> float | None:
    count, rate = fields.get(count_key), fields.get(rate_key)
    if not isinstance(count, (int, float)) or not isinstance(rate, (int, float)):
        return None
    if count < least or not (0 < rate < float("inf")):
        return None
    return float(rate)


class Pace:
    """The recent speeds of a worker's model servers, and the attempt limits they size."""

    def __init__(self) -> None:
        self._prompt: dict[str, deque[float]] = {}
        self._generated: dict[str, deque[float]] = {}

    def observe(self, model: str, speed: Speed | None) -> None:
        """Keep ``speed`` (from :func:`speed_of`) as one of ``model``'s recent measurements."""
        if speed is None:
            return
        if speed.prompt_per_second is not None:
            self._prompt.setdefault(model, deque(maxlen=RECENT)).append(speed.prompt_per_second)
        if speed.generated_per_second is not None:
            self._generated.setdefault(model, deque(maxlen=RECENT)).append(
                speed.generated_per_second
            )

    def limit(self, model: str, window_tokens: int, max_tokens: int) -> tuple[float, str] | None:
        """Seconds an attempt on ``model`` may take, and what they were sized from; or None.

        None until the server has reported both speeds for ``model`` (then the backstop alone
        bounds the attempt). ``window_tokens``: the largest prompt the model takes (the context
        window); ``max_tokens``: the most it may generate in one reply.
        """
        prompt, generated = self._prompt.get(model), self._generated.get(model)
        if not prompt or not generated:
            return None
        slowest_prompt, slowest_generated = min(prompt), min(generated)
        seconds = (
            SAFETY * (window_tokens / slowest_prompt + max_tokens / slowest_generated)
            + SLACK_SECONDS
        )
        why = (
            f"{SAFETY:g}x a {window_tokens}-token prompt at {slowest_prompt:.0f} tokens/s and "
            f"{max_tokens} generated at {slowest_generated:.1f} tokens/s, the server's slowest "
            f"recent speeds, plus {SLACK_SECONDS:g} s"
        )
        return seconds, why
