"""Every setting the service knows, with its type and default."""

from __future__ import annotations

from typing import Any

# dotted key -> (type, default)
SCHEMA: dict[str, tuple[type, Any]] = {
    "server.host": (str, "127.0.0.1"),
    "server.port": (int, 8000),
    "server.workers": (int, 2),
    "server.timeout_s": (float, 30.0),
    "log.level": (str, "INFO"),
    "log.json": (bool, False),
    "features.metrics": (bool, True),
}

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off"})


def defaults() -> dict[str, Any]:
    return {key: default for key, (_, default) in SCHEMA.items()}
