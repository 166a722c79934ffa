"""Parse lines like ``2024-05-01T12:00:03Z ERROR [billing] card declined (order=81)``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

LINE = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)\s+(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"\[(?P<component>[\w.-]+)\]\s+(?P<message>.*)$"
)


@dataclass(frozen=True)
class Record:
    timestamp: datetime
    level: str
    component: str
    message: str


def parse_line(line: str) -> Record | None:
    """One record, or None for lines that are not log records (stack traces, blank lines)."""
    match = LINE.match(line.rstrip("\n"))
    if match is None:
        return None
    return Record(
        timestamp=datetime.strptime(match["ts"], "%Y-%m-%dT%H:%M:%SZ"),
        level=match["level"],
        component=match["component"],
        message=match["message"],
    )


def parse_lines(lines: Iterable[str]) -> Iterator[Record]:
    """Records from ``lines``, lazily, so multi-gigabyte logs never sit in memory at once."""
    for line in lines:
        record = parse_line(line)
        if record is not None:
            yield record
