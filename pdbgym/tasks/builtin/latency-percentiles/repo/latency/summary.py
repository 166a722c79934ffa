"""Load-test summaries and service-level objective checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from latency.stats import mean, percentile

REPORTED_PERCENTILES = (50, 90, 95, 99)


def summarize(samples: Sequence[float]) -> dict[str, float]:
    summary = {"count": float(len(samples)), "mean": round(mean(samples), 3), "max": float(max(samples))}
    for pct in REPORTED_PERCENTILES:
        summary[f"p{pct}"] = round(percentile(samples, pct), 3)
    return summary


@dataclass(frozen=True)
class SloResult:
    pct: float
    limit_ms: float
    observed_ms: float

    @property
    def met(self) -> bool:
        return self.observed_ms <= self.limit_ms


def check_slo(samples: Sequence[float], objectives: dict[float, float]) -> list[SloResult]:
    """``objectives`` maps a percentile to its limit in ms, e.g. {99: 250.0}."""
    return [SloResult(pct, limit, percentile(samples, pct)) for pct, limit in sorted(objectives.items())]
