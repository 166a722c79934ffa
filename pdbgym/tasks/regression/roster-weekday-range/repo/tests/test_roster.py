import pytest

from roster.availability import load_availability
from roster.shifts import load_shifts
from roster.solver import Infeasible, assign
from roster.timeparse import TimeFormatError, window_on

SKILLS = {"ana": {"barista"}, "ben": {"barista", "cook"}, "cy": {"cook"}}

AVAILABILITY = """
ana: Mon-Fri 07:00-15:00
ben: Mon 12:00-22:00, Wed-Thu 12:00-22:00   # ben studies on Tuesdays
cy: Sat 08:00-20:00, Sun 08:00-20:00
"""


def test_overnight_window_runs_into_next_morning():
    window = window_on(4, "22:00-06:00")
    assert window.end - window.start == 8 * 60
    assert window.describe() == "Fri 22:00-06:00"


def test_bad_clock_time():
    with pytest.raises(TimeFormatError, match="25:00"):
        window_on(0, "25:00-26:00")


def test_single_day_entries():
    availability = load_availability(AVAILABILITY)
    assert [w.describe() for w in availability["cy"]] == ["Sat 08:00-20:00", "Sun 08:00-20:00"]


def test_midweek_roster():
    shifts = load_shifts("mon-open: Mon 07:00-11:00 needs barista\nwed-late: Wed 16:00-21:00 needs cook\n"
                         "wed-early: Wed 08:00-12:00 needs barista")
    assert assign(shifts, load_availability(AVAILABILITY), SKILLS) == {
        "mon-open": "ana", "wed-early": "ana", "wed-late": "ben"}


def test_load_is_spread():
    shifts = load_shifts("a: Mon 12:00-14:00 needs barista\nb: Mon 14:00-15:00 needs barista")
    assert assign(shifts, load_availability(AVAILABILITY), SKILLS) == {"a": "ana", "b": "ben"}


def test_nobody_with_skill_is_infeasible():
    shifts = load_shifts("sat-bar: Sat 09:00-12:00 needs barista")
    with pytest.raises(Infeasible, match="sat-bar"):
        assign(shifts, load_availability(AVAILABILITY), SKILLS)


def test_friday_opening_is_staffed():
    shifts = load_shifts("fri-open: Fri 07:00-11:00 needs barista\nsat-kitchen: Sat 09:00-17:00 needs cook")
    assert assign(shifts, load_availability(AVAILABILITY), SKILLS) == {"fri-open": "ana", "sat-kitchen": "cy"}


def test_thursday_evening_is_staffed():
    shifts = load_shifts("thu-close: Thu 17:00-22:00 needs cook")
    assert assign(shifts, load_availability(AVAILABILITY), SKILLS) == {"thu-close": "ben"}


def test_weekday_ranges_include_both_ends():
    from roster.availability import expand_days

    assert expand_days("Mon-Fri") == [0, 1, 2, 3, 4]
    assert expand_days("sat-sun") == [5, 6]
