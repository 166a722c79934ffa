"""boxoffice: seat maps, bookings and ticket pricing."""

from boxoffice.booking import BookingError, BookingService
from boxoffice.pricing import price_for
from boxoffice.venue import SeatMap, parse_seat

__all__ = ["BookingError", "BookingService", "SeatMap", "parse_seat", "price_for"]
