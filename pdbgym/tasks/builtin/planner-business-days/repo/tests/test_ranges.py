from datetime import date

import pytest

from planner import DateRange


def test_length_counts_both_ends():
    assert len(DateRange(date(2024, 3, 1), date(2024, 3, 31))) == 31


def test_contains_and_overlap():
    march = DateRange(date(2024, 3, 1), date(2024, 3, 31))
    assert date(2024, 3, 31) in march
    assert march.overlaps(DateRange(date(2024, 3, 31), date(2024, 4, 2)))
    assert not march.overlaps(DateRange(date(2024, 4, 1), date(2024, 4, 2)))


def test_reversed_range_is_rejected():
    with pytest.raises(ValueError, match="before it starts"):
        DateRange(date(2024, 3, 2), date(2024, 3, 1))


def test_weeks_are_cut_at_sundays():
    pieces = DateRange(date(2024, 3, 6), date(2024, 3, 19)).weeks()
    assert [(p.start.day, p.end.day) for p in pieces] == [(6, 10), (11, 17), (18, 19)]
