"""A token bucket: holds up to ``capacity`` tokens and refills at ``rate`` tokens per second."""

from __future__ import annotations

import time


class TokenBucket:
    def __init__(self, capacity: float, rate: float) -> None:
        if capacity <= 0 or rate <= 0:
            raise ValueError(f"capacity and rate must be positive, got {capacity} and {rate}")
        self.capacity = capacity
        self.rate = rate
        self.tokens = capacity
        self.updated_at: float | None = None  # seconds on the caller's clock

    def _refill(self, now: float) -> None:
        if self.updated_at is not None:
            # Clocks may step backwards a little (NTP); never refill a negative amount.
            elapsed = max(0.0, now - self.updated_at)
            self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
        self.updated_at = now

    def try_take(self, cost: float = 1.0, now: float | None = None) -> bool:
        """Take ``cost`` tokens if there are enough. ``now`` defaults to the monotonic clock."""
        now = now or time.monotonic()
        self._refill(now)
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False

    def seconds_until(self, cost: float = 1.0) -> float:
        """How long after the last call until ``cost`` tokens are available."""
        if cost > self.capacity:
            raise ValueError(f"cost {cost} exceeds the bucket capacity {self.capacity}")
        return max(0.0, (cost - self.tokens) / self.rate)
