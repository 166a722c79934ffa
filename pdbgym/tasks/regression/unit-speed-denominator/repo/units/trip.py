"""Trip planning arithmetic on top of quantities."""

from __future__ import annotations

from units.convert import Quantity, convert, quantity, to_si
from units.parse import Unit
from units.registry import DURATION, LENGTH, SPEED

METRES_PER_SECOND = Unit(1.0, tuple(sorted(SPEED.items())))


def travel_time_h(distance: str, speed: str) -> float:
    """Hours needed to cover ``distance`` (e.g. '150 km') at ``speed`` (e.g. '90 km/h')."""
    metres = to_si(quantity(distance), LENGTH)
    metres_per_second = to_si(quantity(speed), SPEED)
    return metres / metres_per_second / 3600.0


def average_speed(distance: str, duration: str, unit: str = "km/h") -> float:
    """Average speed over a leg, in ``unit``."""
    metres = to_si(quantity(distance), LENGTH)
    seconds = to_si(quantity(duration), DURATION)
    return convert(Quantity(metres / seconds, METRES_PER_SECOND, "m/s"), unit)
