"""Ingest a batch of lines from one source: parse, window, and quarantine what cannot be placed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from logpipe.sources import Event, LogFormatError
from logpipe.windows import NaiveTimestamp, window_start


@dataclass
class IngestResult:
    counts: Counter = field(default_factory=Counter)  # (window start, level) -> events
    quarantined: list[tuple[str, str]] = field(default_factory=list)  # (line, reason)


def ingest(lines: list[str], parse: Callable[[str], Event], width_s: int = 60) -> IngestResult:
    """Count parsed events per window and level; unreadable or unplaceable lines are quarantined."""
    result = IngestResult()
    for line in lines:
        try:
            event = parse(line)
            start = window_start(event.timestamp, width_s)
        except (LogFormatError, NaiveTimestamp) as exc:
            result.quarantined.append((line, str(exc)))
            continue
        result.counts[(start, event.level)] += 1
    return result
