"""Fill a template from a context dict."""

from __future__ import annotations

from typing import Any

from mailmerge.filters import FILTERS
from mailmerge.template import placeholders


class RenderError(KeyError):
    """A placeholder names a missing field or an unknown filter."""

    def __str__(self) -> str:
        return str(self.args[0])


def lookup(context: dict[str, Any], path: str) -> Any:
    value: Any = context
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise RenderError(f"no value for {path!r} (missing {part!r})")
        value = value[part]
    return value


def render(text: str, context: dict[str, Any]) -> str:
    pieces = []
    position = 0
    for placeholder in placeholders(text):
        value = lookup(context, placeholder.field)
        for name in placeholder.filters:
            if name not in FILTERS:
                raise RenderError(f"unknown filter {name!r}; known: {', '.join(sorted(FILTERS))}")
            value = FILTERS[name](value)
        pieces.append(text[position:placeholder.start])
        pieces.append(str(value))
        position = placeholder.end
    pieces.append(text[position:])
    return "".join(pieces)


def required_fields(text: str) -> list[str]:
    """Every field a context must provide, in order of first use."""
    return list(dict.fromkeys(placeholder.field for placeholder in placeholders(text)))
