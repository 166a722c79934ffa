"""What each bank's CSV export looks like.

A statement starts with a comment line naming its format, e.g. ``# format: sparkasse``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StatementFormat:
    """Column delimiter, number punctuation and date layout of one bank's export."""

    name: str
    delimiter: str
    decimal_sep: str
    thousands_sep: str
    date_format: str


FORMATS = {
    "chase": StatementFormat("chase", ",", ".", ",", "%m/%d/%Y"),
    "sparkasse": StatementFormat("sparkasse", ";", ",", ".", "%d.%m.%Y"),
    "revolut": StatementFormat("revolut", ",", ".", "", "%Y-%m-%d"),
}


class UnknownFormat(ValueError):
    """The statement does not name a format we can read."""


def detect_format(first_line: str) -> StatementFormat:
    """The format named by a ``# format: <name>`` first line (name is case-insensitive)."""
    prefix = "# format:"
    if not first_line.lower().startswith(prefix):
        raise UnknownFormat(f"statement must start with '{prefix} <name>', got {first_line!r}")
    name = first_line[len(prefix):].strip().lower()
    if name not in FORMATS:
        raise UnknownFormat(f"unknown statement format {name!r}; known: {sorted(FORMATS)}")
    return FORMATS[name]
