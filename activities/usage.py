"""Token usage of a model step and its cost (``Usage``), shared by activities, workflows and results."""

from __future__ import annotations

from pydantic import BaseModel


class Usage(BaseModel):
    """Token usage as reported by the model server, and its cost.

    Token counts are whole tokens; ``cost_usd`` is US dollars computed from the spec's price table.
    ``cached_prompt_tokens`` is the part of ``prompt_tokens`` the server took from its prompt
    cache instead of processing again (OpenAI's ``usage.prompt_tokens_details.cached_tokens``;
    llama.cpp's ``timings.cache_n`` where the usage does not say; 0 when the endpoint says
    neither). It is priced at the spec's ``pricing.cached_prompt_per_mtok``.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    cached_prompt_tokens: int = 0

    def add(self, other: Usage) -> Usage:
        """Return the sum of two usages (a new object)."""
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            cost_usd=round(self.cost_usd + other.cost_usd, 8),
            cached_prompt_tokens=self.cached_prompt_tokens + other.cached_prompt_tokens,
        )
