"""Fixed-width UTC time windows."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from logpipe.sources import Event

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class NaiveTimestamp(ValueError):
    """A timestamp without a UTC offset: its instant is unknown, so it cannot be windowed."""


def window_start(timestamp: datetime, width_s: int) -> datetime:
    """Start (UTC) of the ``width_s``-second window holding ``timestamp``."""
    if timestamp.tzinfo is None or timestamp.utcoffset() is None:
        raise NaiveTimestamp(f"timestamp {timestamp.isoformat()} has no UTC offset")
    seconds = (timestamp - EPOCH).total_seconds()
    return EPOCH + timedelta(seconds=seconds - seconds % width_s)


def count_by_window(events: list[Event], width_s: int) -> Counter:
    """(window start, level) -> number of events."""
    return Counter((window_start(event.timestamp, width_s), event.level) for event in events)
