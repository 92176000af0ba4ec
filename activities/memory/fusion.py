"""Reciprocal rank fusion: one score from several rankings (Cormack et al., SIGIR 2009).

An item's score is ``sum 1 / (RRF_K + rank)`` over the rankings it appears in (ranks from 1).
Both memory backends fuse their word ranking and their vector ranking this way.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

RRF_K = 60
K = TypeVar("K", bound=Hashable)


def fuse(rankings: Iterable[Sequence[K]], scores: dict[K, float] | None = None) -> dict[K, float]:
    """Add each ranking's reciprocal ranks into ``scores`` (a new dict when None); returns it."""
    out: dict[K, float] = {} if scores is None else scores
    for ranked in rankings:
        for rank, key in enumerate(ranked, 1):
            out[key] = out.get(key, 0.0) + 1.0 / (RRF_K + rank)
    return out
