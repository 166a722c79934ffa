"""Read INI-style text with dotted section names into nested dicts.

``[server.tls]`` / ``verify = false`` becomes ``{"server": {"tls": {"verify": False}}}``.
Values are coerced: true/false -> bool, digits -> int, everything else stays a string.
"""

from __future__ import annotations

from typing import Any


class ConfigSyntaxError(ValueError):
    """A line that is neither a section header, a key = value pair, a comment nor blank."""


def coerce(text: str) -> Any:
    value = text.strip()
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    if value.lstrip("-").isdigit():
        return int(value)
    return value.strip('"')


def section(tree: dict, dotted: str) -> dict:
    """The nested dict for a dotted path, created on the way."""
    node = tree
    for part in dotted.split("."):
        node = node.setdefault(part, {})
    return node


def load_text(text: str, origin: str = "<string>") -> dict:
    """Parse INI text; ``origin`` names the file in error messages."""
    tree: dict = {}
    current = tree
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            current = section(tree, line[1:-1].strip())
        elif "=" in line:
            key, _, value = line.partition("=")
            current[key.strip()] = coerce(value)
        else:
            raise ConfigSyntaxError(f"{origin}:{number}: expected '[section]' or 'key = value', got {raw!r}")
    return tree
