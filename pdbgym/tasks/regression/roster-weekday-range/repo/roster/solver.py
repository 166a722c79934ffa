"""Assign one qualified, available worker to every shift, spreading hours evenly."""

from __future__ import annotations

from roster.shifts import Shift
from roster.timeparse import Window


class Infeasible(RuntimeError):
    """Some shift cannot be staffed."""


def candidates(shift: Shift, availability: dict[str, list[Window]], skills: dict[str, set[str]],
               booked: dict[str, list[Window]]) -> list[str]:
    """Workers with the skill, a window covering the shift and no overlapping booking."""
    found = []
    for worker, windows in availability.items():
        if shift.skill not in skills.get(worker, set()):
            continue
        if not any(window.covers(shift.window) for window in windows):
            continue
        if any(b.start < shift.window.end and shift.window.start < b.end for b in booked.get(worker, [])):
            continue
        found.append(worker)
    return found


def assign(shifts: list[Shift], availability: dict[str, list[Window]],
           skills: dict[str, set[str]]) -> dict[str, str]:
    """shift name -> worker; the candidate with the fewest booked minutes wins (ties by name)."""
    booked: dict[str, list[Window]] = {}
    roster: dict[str, str] = {}
    for shift in shifts:
        options = candidates(shift, availability, skills, booked)
        if not options:
            raise Infeasible(f"nobody can work {shift.name} ({shift.window.describe()}, needs {shift.skill})")
        load = {w: sum(b.end - b.start for b in booked.get(w, [])) for w in options}
        chosen = min(options, key=lambda worker: (load[worker], worker))
        booked.setdefault(chosen, []).append(shift.window)
        roster[shift.name] = chosen
    return roster
