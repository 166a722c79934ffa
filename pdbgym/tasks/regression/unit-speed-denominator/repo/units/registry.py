"""Known unit symbols: scale factor to SI and dimension exponents over mass M, length L, time T."""

from __future__ import annotations

Dims = dict[str, int]

UNITS: dict[str, tuple[float, Dims]] = {
    "m": (1.0, {"L": 1}),
    "km": (1000.0, {"L": 1}),
    "cm": (0.01, {"L": 1}),
    "mi": (1609.344, {"L": 1}),
    "ft": (0.3048, {"L": 1}),
    "s": (1.0, {"T": 1}),
    "min": (60.0, {"T": 1}),
    "h": (3600.0, {"T": 1}),
    "kg": (1.0, {"M": 1}),
    "g": (0.001, {"M": 1}),
    "lb": (0.45359237, {"M": 1}),
    "mph": (1609.344 / 3600.0, {"L": 1, "T": -1}),
    "kn": (1852.0 / 3600.0, {"L": 1, "T": -1}),
    "N": (1.0, {"M": 1, "L": 1, "T": -2}),
    "J": (1.0, {"M": 1, "L": 2, "T": -2}),
}

SPEED: Dims = {"L": 1, "T": -1}
LENGTH: Dims = {"L": 1}
DURATION: Dims = {"T": 1}


class UnknownUnit(ValueError):
    """A symbol that is not in the registry."""


def lookup(symbol: str) -> tuple[float, Dims]:
    """(factor to SI, dimension exponents) of one unit symbol."""
    if symbol not in UNITS:
        raise UnknownUnit(f"unknown unit {symbol!r}; known: {', '.join(sorted(UNITS))}")
    return UNITS[symbol]
