"""planner: date ranges, holiday calendars and sprint plans."""

from planner.calendar import WorkCalendar
from planner.ranges import DateRange
from planner.sprints import Sprint, plan_sprints

__all__ = ["DateRange", "Sprint", "WorkCalendar", "plan_sprints"]
