import pytest

from boxoffice import BookingError, BookingService, SeatMap, price_for


def test_prices_in_cents():
    rows = list("ABCDEF")
    assert price_for("A", rows) == 1200
    assert price_for("E", rows) == 1500
    assert price_for("B", rows, "child") == 720
    with pytest.raises(ValueError, match="unknown concession"):
        price_for("A", rows, "vip")


def test_hold_prices_and_references():
    service = BookingService(SeatMap(rows=6, seats_per_row=10))
    first = service.hold(["a1", "a2"])
    second = service.hold(["F5"], concession="senior")
    assert (first.reference, first.total_cents) == ("BK00001", 2400)
    assert (second.reference, second.total_cents) == ("BK00002", 1200)


def test_double_booking_is_refused():
    service = BookingService(SeatMap(rows=1, seats_per_row=5))
    service.hold(["A1", "A2"])
    with pytest.raises(BookingError, match="A2"):
        service.hold(["A2", "A3"])


def test_cancel_frees_the_seats():
    service = BookingService(SeatMap(rows=1, seats_per_row=3))
    booking = service.hold(["A1", "A2", "A3"])
    service.cancel(booking.reference)
    assert service.hold_best(3).seats == ["A1", "A2", "A3"]


def test_group_gets_back_row_block_then_next_row():
    service = BookingService(SeatMap(rows=3, seats_per_row=4))
    service.hold(["C2"])
    group = service.hold_best(3)
    assert group.seats == ["B1", "B2", "B3"]
