"""Working days: Monday to Friday, minus public holidays."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from planner.ranges import ONE_DAY, DateRange


class WorkCalendar:
    def __init__(self, holidays: Iterable[date] = ()) -> None:
        self.holidays = frozenset(holidays)

    def is_working_day(self, day: date) -> bool:
        return day.weekday() < 5 and day not in self.holidays

    def working_days(self, period: DateRange) -> list[date]:
        return [day for day in period if self.is_working_day(day)]

    def count_working_days(self, start: date, end: date) -> int:
        return len(self.working_days(DateRange(start, end)))

    def add_working_days(self, start: date, count: int) -> date:
        """The working day ``count`` working days after ``start`` (start itself not counted)."""
        if count < 0:
            raise ValueError("count must be >= 0")
        day = start
        while count:
            day += ONE_DAY
            if self.is_working_day(day):
                count -= 1
        return day
