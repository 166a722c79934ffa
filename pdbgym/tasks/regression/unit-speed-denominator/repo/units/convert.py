"""Quantities (value + unit) and conversion between units of the same dimension."""

from __future__ import annotations

from dataclasses import dataclass

from units.parse import Unit, parse_unit
from units.registry import Dims


class DimensionError(ValueError):
    """A conversion between units that measure different things."""


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: Unit
    unit_text: str


def describe(dims: Dims) -> str:
    """'L T^-1' style text for dimension exponents; '1' for dimensionless."""
    parts = [dim if power == 1 else f"{dim}^{power}" for dim, power in sorted(dims.items())]
    return " ".join(parts) or "1"


def quantity(text: str) -> Quantity:
    """Parse '12.5 km/h' into a Quantity."""
    value_text, _, unit_text = text.strip().partition(" ")
    return Quantity(float(value_text), parse_unit(unit_text), unit_text.strip())


def to_si(q: Quantity, expected: Dims) -> float:
    """The value in SI base units, after checking the quantity measures ``expected``."""
    if q.unit.dims_dict() != expected:
        raise DimensionError(
            f"{q.value} {q.unit_text} has dimension {describe(q.unit.dims_dict())}, expected {describe(expected)}"
        )
    return q.value * q.unit.factor


def convert(q: Quantity, target_text: str) -> float:
    """The value of ``q`` expressed in the unit ``target_text``."""
    target = parse_unit(target_text)
    return to_si(q, target.dims_dict()) / target.factor
