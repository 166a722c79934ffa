"""JSON over HTTP with the standard library: one blocking request, and errors that say which way it failed.

Used for checks before a run (is the model server there, what does it serve) and for one-shot scoring
calls; callers turn these errors into their own, adding what the user should do.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping

from pdbgym.errors import PdbgymError
from pdbgym.fileio import JSONValue


class HttpJsonError(PdbgymError):
    """A JSON request failed; ``url`` is where it went, ``detail`` the reason in a few words."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(f"{url}: {detail}")
        self.url, self.detail = url, detail


class HttpStatusError(HttpJsonError):
    """The server answered with a status other than 2xx; ``status`` holds it, ``detail`` the body's start."""

    def __init__(self, url: str, status: int, detail: str) -> None:
        super().__init__(url, detail)
        self.status = status


class HttpUnreachableError(HttpJsonError):
    """Nothing answered at ``url`` (refused, timed out, unknown host)."""


class HttpNotJsonError(HttpJsonError):
    """The server answered, but not with JSON."""


def request_json(url: str, body: Mapping[str, object] | None = None, timeout_s: float = 30.0,
                 api_key: str | None = None) -> JSONValue:
    """GET (``body`` None) or POST ``body`` as JSON to ``url``; the decoded answer.

    ``timeout_s`` bounds connecting and each read (seconds). Raises ``HttpStatusError`` (with the
    first 300 characters of the answer), ``HttpUnreachableError`` or ``HttpNotJsonError``.
    """
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(url, data=data, headers=headers, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise HttpStatusError(url, exc.code, exc.read()[:300].decode(errors="replace")) from exc
    except (urllib.error.URLError, OSError) as exc:  # TimeoutError and ConnectionError are OSErrors
        raise HttpUnreachableError(url, str(getattr(exc, "reason", exc))) from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HttpNotJsonError(url, str(exc)) from exc
