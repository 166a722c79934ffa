"""Cut a period into sprints of a fixed number of working days."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from planner.calendar import WorkCalendar
from planner.ranges import ONE_DAY, DateRange


@dataclass(frozen=True)
class Sprint:
    number: int
    period: DateRange
    working_days: int


def plan_sprints(start: date, end: date, days_per_sprint: int, calendar: WorkCalendar) -> list[Sprint]:
    """Consecutive sprints covering ``start..end``; the last one may be shorter."""
    if days_per_sprint < 1:
        raise ValueError("days_per_sprint must be >= 1")
    sprints: list[Sprint] = []
    cursor = start
    while cursor <= end:
        while cursor <= end and not calendar.is_working_day(cursor):
            cursor += ONE_DAY
        if cursor > end:
            break
        last = min(calendar.add_working_days(cursor, days_per_sprint - 1), end)
        period = DateRange(cursor, last)
        sprints.append(Sprint(len(sprints) + 1, period, len(calendar.working_days(period))))
        cursor = last + ONE_DAY
    return sprints
