"""Serialise API payloads.

Every value must already be JSON-ready (see shopapi.mappers). The encoder refuses anything else
rather than guessing, so that a Decimal like 1E+2 or a naive datetime never reaches a client.
"""

from __future__ import annotations

import json
from typing import Any


class ApiEncodingError(TypeError):
    """A payload value that the mappers did not convert."""


def _refuse(value: Any) -> Any:
    raise ApiEncodingError(f"{type(value).__name__} value {value!r} is not JSON-ready; map it in shopapi.mappers")


def encode(payload: dict) -> str:
    """Compact, key-sorted JSON text of a mapped payload."""
    return json.dumps(payload, default=_refuse, sort_keys=True, separators=(",", ":"))
