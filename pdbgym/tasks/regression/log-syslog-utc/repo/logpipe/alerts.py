"""Error-rate alerts per service and window."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from logpipe.sources import Event
from logpipe.windows import window_start


@dataclass(frozen=True)
class Alert:
    service: str
    window: datetime
    errors: int
    total: int


def error_rate_alerts(events: list[Event], width_s: int = 300, threshold: float = 0.5,
                      min_events: int = 2) -> list[Alert]:
    """Windows in which a service's share of error events exceeds ``threshold`` (sorted)."""
    totals: dict[tuple[str, datetime], list[int]] = defaultdict(lambda: [0, 0])
    for event in events:
        key = (event.service, window_start(event.timestamp, width_s))
        totals[key][1] += 1
        totals[key][0] += event.level == "error"
    return sorted(
        Alert(service, window, errors, total)
        for (service, window), (errors, total) in totals.items()
        if total >= min_events and errors / total > threshold
    )
