"""Descriptive statistics over latency samples (milliseconds)."""

from __future__ import annotations

from collections.abc import Sequence


def mean(samples: Sequence[float]) -> float:
    if not samples:
        raise ValueError("mean of no samples")
    return sum(samples) / len(samples)


def percentile(samples: Sequence[float], pct: float) -> float:
    """The ``pct``-th percentile with linear interpolation between closest ranks.

    Matches numpy.percentile's default ("linear") method: p50 of [1, 2, 3, 4] is 2.5.
    """
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= pct <= 100:
        raise ValueError(f"pct must be within 0..100, got {pct}")
    ordered = sorted(samples)
    position = (len(ordered) - 1) * pct // 100
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    weight = position - lower
    return ordered[lower] + (ordered[upper] - ordered[lower]) * weight
