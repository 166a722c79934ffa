"""Aggregate records into a report."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from logstats.parse import Record, parse_lines

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
PROBLEM_LEVELS = frozenset({"ERROR", "CRITICAL"})


@dataclass
class Report:
    total: int = 0
    by_level: dict[str, int] = field(default_factory=dict)
    noisiest_components: list[tuple[str, int]] = field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None

    @property
    def error_rate(self) -> float:
        """Share of records at ERROR or above, 0.0 for an empty log."""
        if not self.total:
            return 0.0
        return sum(self.by_level.get(level, 0) for level in PROBLEM_LEVELS) / self.total


def _time_span(records: Iterable[Record]) -> tuple[datetime | None, datetime | None]:
    first = last = None
    for record in records:
        if first is None or record.timestamp < first:
            first = record.timestamp
        if last is None or record.timestamp > last:
            last = record.timestamp
    return first, last


def build_report(records: Iterable[Record], top: int = 3) -> Report:
    first, last = _time_span(records)
    levels = Counter(record.level for record in records)
    components = Counter(record.component for record in records if record.level in PROBLEM_LEVELS)
    return Report(
        total=sum(levels.values()),
        by_level={level: levels[level] for level in LEVELS if levels[level]},
        noisiest_components=sorted(components.items(), key=lambda item: (-item[1], item[0]))[:top],
        first=first,
        last=last,
    )


def summarize_log(text: str, top: int = 3) -> Report:
    return build_report(parse_lines(text.splitlines()), top=top)
