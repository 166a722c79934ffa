"""Shifts to staff, from lines like ``fri-close: Fri 16:00-22:00 needs barista``."""

from __future__ import annotations

from dataclasses import dataclass

from roster.timeparse import TimeFormatError, Window, day_index, window_on


@dataclass(frozen=True)
class Shift:
    name: str
    window: Window
    skill: str


def load_shifts(text: str) -> list[Shift]:
    """Shifts in start order."""
    shifts = []
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        name, _, rest = line.partition(":")
        words = rest.split()
        if len(words) != 4 or words[2] != "needs":
            raise TimeFormatError(f"shift line {line!r}: expected 'name: Day HH:MM-HH:MM needs skill'")
        shifts.append(Shift(name.strip(), window_on(day_index(words[0]), words[1]), words[3]))
    return sorted(shifts, key=lambda shift: shift.window)
