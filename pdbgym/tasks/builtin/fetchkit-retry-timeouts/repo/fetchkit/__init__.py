"""fetchkit: a JSON API client over a pluggable transport, with retries."""

from fetchkit.client import ApiError, JsonClient
from fetchkit.retry import RetryPolicy, call_with_retry

__all__ = ["ApiError", "JsonClient", "RetryPolicy", "call_with_retry"]
