import pytest

from boxoffice import SeatMap, parse_seat


def test_parse_seat_labels():
    assert parse_seat(" c12 ") == ("C", 12)
    with pytest.raises(ValueError, match="must look like"):
        parse_seat("12C")


def test_capacity_and_bounds():
    hall = SeatMap(rows=5, seats_per_row=8)
    assert hall.capacity == 40
    with pytest.raises(ValueError, match="no seat F1"):
        hall.is_free("F1")


def test_taking_a_seat_leaves_the_rest_of_the_hall_free():
    hall = SeatMap(rows=4, seats_per_row=6)
    hall.take("B3")
    assert not hall.is_free("B3")
    assert hall.free_count() == 23


def test_single_row_take_and_release():
    hall = SeatMap(rows=1, seats_per_row=4)
    hall.take("A2")
    assert hall.free_in_row("A") == [1, 3, 4]
    hall.release("A2")
    assert hall.free_in_row("A") == [1, 2, 3, 4]
