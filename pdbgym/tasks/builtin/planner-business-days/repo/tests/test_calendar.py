from datetime import date

from planner import WorkCalendar, plan_sprints

EASTER_2024 = [date(2024, 3, 29), date(2024, 4, 1)]


def test_working_days_over_a_weekend_ending():
    calendar = WorkCalendar()
    # Monday 4 March .. Sunday 10 March
    assert calendar.count_working_days(date(2024, 3, 4), date(2024, 3, 10)) == 5


def test_working_days_ending_on_a_friday():
    calendar = WorkCalendar(EASTER_2024)
    # Monday 25 March .. Friday 5 April, with Good Friday and Easter Monday off
    assert calendar.count_working_days(date(2024, 3, 25), date(2024, 4, 5)) == 8


def test_add_working_days_skips_holidays():
    calendar = WorkCalendar(EASTER_2024)
    assert calendar.add_working_days(date(2024, 3, 28), 1) == date(2024, 4, 2)


def test_two_week_sprints():
    sprints = plan_sprints(date(2024, 1, 1), date(2024, 1, 31), 10, WorkCalendar())
    assert [(s.period.start.day, s.period.end.day) for s in sprints] == [(1, 12), (15, 26), (29, 31)]
    assert [s.working_days for s in sprints] == [10, 10, 3]
