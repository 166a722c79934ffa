"""Fixed-width histograms for a quick look at a latency distribution."""

from __future__ import annotations

from collections.abc import Sequence


def histogram(samples: Sequence[float], bucket_ms: float, max_ms: float) -> list[tuple[str, int]]:
    """Counts per bucket [k*bucket_ms, (k+1)*bucket_ms); one overflow bucket for >= max_ms."""
    if bucket_ms <= 0 or max_ms <= 0:
        raise ValueError("bucket_ms and max_ms must be positive")
    buckets = int(max_ms // bucket_ms)
    counts = [0] * (buckets + 1)
    for sample in samples:
        index = min(int(sample // bucket_ms), buckets)
        counts[index] += 1
    labels = [f"{k * bucket_ms:g}-{(k + 1) * bucket_ms:g}" for k in range(buckets)] + [f">={max_ms:g}"]
    return list(zip(labels, counts))
