"""One bucket per client key, created on first use, forgotten when idle."""

from __future__ import annotations

from dataclasses import dataclass

from throttle.bucket import TokenBucket


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after_s: float  # 0.0 when allowed


class KeyedLimiter:
    def __init__(self, capacity: float, rate: float, idle_ttl_s: float = 300.0) -> None:
        self.capacity = capacity
        self.rate = rate
        self.idle_ttl_s = idle_ttl_s
        self._buckets: dict[str, TokenBucket] = {}

    def check(self, key: str, now: float | None = None, cost: float = 1.0) -> Decision:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self.capacity, self.rate)
        if bucket.try_take(cost, now):
            return Decision(True, 0.0)
        return Decision(False, round(bucket.seconds_until(cost), 3))

    def forget_idle(self, now: float) -> list[str]:
        """Drop buckets unused for ``idle_ttl_s``; a fresh bucket is full, so this loses nothing."""
        idle = [key for key, bucket in self._buckets.items()
                if bucket.updated_at is not None and now - bucket.updated_at >= self.idle_ttl_s]
        for key in idle:
            del self._buckets[key]
        return sorted(idle)

    def __len__(self) -> int:
        return len(self._buckets)
