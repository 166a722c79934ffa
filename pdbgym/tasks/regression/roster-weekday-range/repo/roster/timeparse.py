"""Weekly time windows in minutes since Monday 00:00."""

from __future__ import annotations

from dataclasses import dataclass

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
MINUTES_PER_DAY = 24 * 60


class TimeFormatError(ValueError):
    """A day name, clock time or window that cannot be read."""


@dataclass(frozen=True, order=True)
class Window:
    """[start, end) in minutes since Monday 00:00; end may pass midnight for overnight windows."""

    start: int
    end: int

    def covers(self, other: Window) -> bool:
        return self.start <= other.start and other.end <= self.end

    def describe(self) -> str:
        day = DAYS[self.start // MINUTES_PER_DAY]
        return f"{day} {_clock(self.start)}-{_clock(self.end)}"


def _clock(minute_of_week: int) -> str:
    minutes = minute_of_week % MINUTES_PER_DAY
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def day_index(name: str) -> int:
    """0 for Mon ... 6 for Sun (three-letter names, any case)."""
    normal = name.strip().title()
    if normal not in DAYS:
        raise TimeFormatError(f"unknown day {name!r}; use one of {', '.join(DAYS)}")
    return DAYS.index(normal)


def parse_clock(text: str) -> int:
    """'HH:MM' -> minutes since midnight."""
    hours, _, minutes = text.strip().partition(":")
    if not (hours.isdigit() and minutes.isdigit() and int(hours) < 24 and int(minutes) < 60):
        raise TimeFormatError(f"bad clock time {text!r}; use HH:MM")
    return int(hours) * 60 + int(minutes)


def window_on(day: int, span: str) -> Window:
    """The window 'HH:MM-HH:MM' on a day; an end before the start means the next morning."""
    start_text, _, end_text = span.partition("-")
    start, end = parse_clock(start_text), parse_clock(end_text)
    if end <= start:
        end += MINUTES_PER_DAY
    offset = day * MINUTES_PER_DAY
    return Window(offset + start, offset + end)
