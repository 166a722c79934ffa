"""Find ``{{ field.path | filter | filter }}`` placeholders in template text."""

from __future__ import annotations

import re
from dataclasses import dataclass

PLACEHOLDER = re.compile(r"\{\{\s*(?P<body>.+)\s*\}\}")


@dataclass(frozen=True)
class Placeholder:
    start: int  # offsets into the template text, end exclusive
    end: int
    field: str  # dotted path into the context, e.g. "order.total"
    filters: tuple[str, ...]


def placeholders(text: str) -> list[Placeholder]:
    found = []
    for match in PLACEHOLDER.finditer(text):
        field, *filters = [part.strip() for part in match["body"].split("|")]
        if not field:
            raise ValueError(f"empty placeholder at offset {match.start()}")
        found.append(Placeholder(match.start(), match.end(), field, tuple(filters)))
    return found
