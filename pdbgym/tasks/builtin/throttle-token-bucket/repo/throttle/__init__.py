"""throttle: token buckets and a per-key limiter built from them."""

from throttle.bucket import TokenBucket
from throttle.limiter import Decision, KeyedLimiter

__all__ = ["Decision", "KeyedLimiter", "TokenBucket"]
