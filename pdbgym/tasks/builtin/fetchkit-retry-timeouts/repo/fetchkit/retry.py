"""Retry an operation on transient network failures, with exponential backoff."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 4
    base_delay_s: float = 0.2
    max_delay_s: float = 5.0
    multiplier: float = 2.0

    def delay_before(self, attempt: int) -> float:
        """Seconds to wait before attempt number ``attempt`` (the first retry is attempt 2)."""
        return min(self.base_delay_s * self.multiplier ** (attempt - 2), self.max_delay_s)


def call_with_retry(
    operation: Callable[[], T],
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[int, BaseException], None] | None = None,
) -> T:
    """Run ``operation``; retry connection failures and timeouts, re-raise anything else at once."""
    attempt = 1
    while True:
        try:
            return operation()
        except ConnectionError or TimeoutError as exc:
            if attempt >= policy.max_attempts:
                raise
            attempt += 1
            if on_retry is not None:
                on_retry(attempt, exc)
            sleep(policy.delay_before(attempt))
