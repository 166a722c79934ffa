"""Holds and confirmed bookings on top of a seat map."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from boxoffice.pricing import price_for
from boxoffice.venue import SeatMap, parse_seat


class BookingError(Exception):
    """A booking request cannot be satisfied."""


@dataclass
class Booking:
    reference: str
    seats: list[str]
    total_cents: int
    confirmed: bool = False


class BookingService:
    def __init__(self, seat_map: SeatMap) -> None:
        self.seat_map = seat_map
        self._bookings: dict[str, Booking] = {}
        self._counter = itertools.count(1)

    def hold(self, seats: list[str], concession: str = "adult") -> Booking:
        taken = [seat for seat in seats if not self.seat_map.is_free(seat)]
        if taken:
            raise BookingError(f"seats already taken: {', '.join(taken)}")
        total = sum(price_for(parse_seat(s)[0], self.seat_map.row_labels, concession) for s in seats)
        for seat in seats:
            self.seat_map.take(seat)
        booking = Booking(f"BK{next(self._counter):05d}", [s.upper() for s in seats], total)
        self._bookings[booking.reference] = booking
        return booking

    def hold_best(self, size: int, concession: str = "adult") -> Booking:
        block = self.seat_map.best_block(size)
        if block is None:
            raise BookingError(f"no block of {size} adjacent seats left")
        return self.hold(block, concession)

    def confirm(self, reference: str) -> Booking:
        booking = self._get(reference)
        booking.confirmed = True
        return booking

    def cancel(self, reference: str) -> None:
        booking = self._get(reference)
        for seat in booking.seats:
            self.seat_map.release(seat)
        del self._bookings[reference]

    def _get(self, reference: str) -> Booking:
        if reference not in self._bookings:
            raise BookingError(f"no booking {reference}")
        return self._bookings[reference]
