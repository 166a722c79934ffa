"""Closed date ranges: both the first and the last day belong to the range."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta

ONE_DAY = timedelta(days=1)


@dataclass(frozen=True)
class DateRange:
    start: date
    end: date  # inclusive

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"range ends ({self.end}) before it starts ({self.start})")

    def __contains__(self, day: date) -> bool:
        return self.start <= day <= self.end

    def __len__(self) -> int:
        return (self.end - self.start).days + 1

    def __iter__(self) -> Iterator[date]:
        day = self.start
        while day < self.end:
            yield day
            day += ONE_DAY

    def overlaps(self, other: DateRange) -> bool:
        return self.start <= other.end and other.start <= self.end

    def weeks(self) -> list[DateRange]:
        """Split at Sundays: each piece runs Monday..Sunday, clipped to the range."""
        pieces = []
        piece_start = self.start
        while piece_start <= self.end:
            sunday = piece_start + timedelta(days=6 - piece_start.weekday())
            piece_end = min(sunday, self.end)
            pieces.append(DateRange(piece_start, piece_end))
            piece_start = piece_end + ONE_DAY
        return pieces
