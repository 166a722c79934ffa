"""A small JSON-over-HTTP client. The transport does the I/O; the client adds retries and decoding."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlencode

from fetchkit.retry import RetryPolicy, call_with_retry


class Transport(Protocol):
    def request(self, method: str, url: str, body: bytes | None) -> tuple[int, bytes]:
        """Send one request; return (status, body). Raises ConnectionError / TimeoutError."""


class ApiError(Exception):
    def __init__(self, status: int, url: str, detail: str) -> None:
        self.status = status
        super().__init__(f"{status} from {url}: {detail}")


class JsonClient:
    def __init__(
        self,
        base_url: str,
        transport: Transport,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.transport = transport
        self.policy = policy or RetryPolicy()
        self.sleep = sleep
        self.retries: list[tuple[int, str]] = []

    def url(self, path: str, params: dict[str, Any] | None = None) -> str:
        url = f"{self.base_url}/{path.lstrip('/')}"
        return f"{url}?{urlencode(sorted(params.items()))}" if params else url

    def _send(self, method: str, url: str, payload: Any = None) -> Any:
        body = None if payload is None else json.dumps(payload).encode()
        status, raw = call_with_retry(
            lambda: self.transport.request(method, url, body),
            self.policy,
            sleep=self.sleep,
            on_retry=lambda attempt, exc: self.retries.append((attempt, type(exc).__name__)),
        )
        if status >= 400:
            raise ApiError(status, url, raw.decode(errors="replace")[:200])
        return json.loads(raw) if raw else None

    def get(self, path: str, **params: Any) -> Any:
        return self._send("GET", self.url(path, params))

    def post(self, path: str, payload: Any) -> Any:
        return self._send("POST", self.url(path), payload)
