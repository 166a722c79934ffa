"""Read who can work when, from lines like ``alice: Mon-Fri 09:00-17:00, Sat 10:00-14:00``."""

from __future__ import annotations

from roster.timeparse import TimeFormatError, Window, day_index, window_on


def expand_days(spec: str) -> list[int]:
    """Day indices named by 'Tue' or an inclusive range 'Mon-Fri'."""
    if "-" not in spec:
        return [day_index(spec)]
    first, _, last = spec.partition("-")
    start, stop = day_index(first), day_index(last)
    if stop < start:
        raise TimeFormatError(f"day range {spec!r} runs backwards; write it Monday-first")
    return list(range(start, stop))


def parse_entry(entry: str) -> list[Window]:
    """Windows for one 'DAYS HH:MM-HH:MM' entry."""
    days, _, span = entry.strip().partition(" ")
    if not span:
        raise TimeFormatError(f"availability entry {entry!r} needs days and a time span")
    return [window_on(day, span.strip()) for day in expand_days(days)]


def load_availability(text: str) -> dict[str, list[Window]]:
    """worker -> sorted windows; blank lines and '#' comments are skipped."""
    availability: dict[str, list[Window]] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        worker, _, entries = line.partition(":")
        windows = [w for entry in entries.split(",") if entry.strip() for w in parse_entry(entry)]
        availability.setdefault(worker.strip(), []).extend(windows)
    return {worker: sorted(windows) for worker, windows in availability.items()}
