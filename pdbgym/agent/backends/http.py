"""HTTP plumbing of the server backends: blocking checks before a run (``pdbgym.httpjson``), async calls during it."""

from __future__ import annotations

import asyncio
from typing import Any

from pdbgym import httpjson
from pdbgym.agent.backends.base import BackendError


class ServerUnreachableError(BackendError):
    """Nothing answers at the server URL (refused, timed out, unknown host)."""


def _httpx() -> Any:
    try:
        import httpx  # optional: httpx (pdbgym[serve])
    except ImportError:  # openai >= 3 ships the client as httpx2
        import httpx2 as httpx  # optional: the httpx that openai >= 3 ships (pdbgym[serve])
    return httpx


def request_json(url: str, body: dict[str, Any] | None = None, timeout_s: float = 30.0,
                 api_key: str | None = None) -> dict[str, Any]:
    """GET (``body`` None) or POST JSON; a ``BackendError`` naming the URL when it cannot be reached."""
    try:
        return httpjson.request_json(url, body, timeout_s, api_key)
    except httpjson.HttpStatusError as exc:
        raise BackendError(f"{url} answered HTTP {exc.status}: {exc.detail}") from exc
    except httpjson.HttpUnreachableError as exc:
        raise ServerUnreachableError(f"cannot reach model server at {url} ({exc.detail}); is it running, and is the "
                                     "URL right (e.g. http://127.0.0.1:8000)?") from exc
    except httpjson.HttpNotJsonError as exc:
        raise BackendError(f"{url} did not answer JSON ({exc.detail}); is it an OpenAI-compatible server?") from exc


class AsyncJsonClient:
    """A pooled async HTTP client: concurrent episodes in one event loop share its connections.

    An httpx client belongs to the event loop that first used it, so a new loop (a new
    ``asyncio.run``, e.g. the next episode in a worker) gets a fresh client.
    """

    def __init__(self, base_url: str, timeout_s: float, api_key: str | None = None, max_connections: int = 64):
        self.base_url, self.timeout_s, self.max_connections = base_url, timeout_s, max_connections
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _current(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            httpx = _httpx()
            self._client = httpx.AsyncClient(base_url=self.base_url, timeout=self.timeout_s, headers=self.headers,
                                             limits=httpx.Limits(max_connections=self.max_connections))
            self._loop = loop
        return self._client

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self._current().post(path, json=body)
        if response.status_code != 200:
            raise BackendError(f"{path} answered HTTP {response.status_code}: {response.text[:300]}")
        return response.json()

    async def aclose(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            await self._client.aclose()
        self._client, self._loop = None, None
