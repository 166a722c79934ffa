"""Parse compound unit expressions such as ``kg*m/s^2`` or ``km/h``.

Grammar: numerator terms joined by '*', optionally one '/' followed by denominator terms joined
by '*'. A term is a symbol with an optional integer exponent (``s^2``). Every denominator term
counts with a negated exponent.
"""

from __future__ import annotations

from dataclasses import dataclass

from units.registry import Dims, lookup


class UnitSyntaxError(ValueError):
    """A unit expression that does not follow the grammar."""


@dataclass(frozen=True)
class Unit:
    """A parsed unit: ``factor`` converts a value in this unit to SI; ``dims`` has no zero entries."""

    factor: float
    dims: tuple[tuple[str, int], ...]

    def dims_dict(self) -> Dims:
        return dict(self.dims)


def _term(term: str, sign: int) -> tuple[float, Dims]:
    symbol, _, exponent = term.partition("^")
    if not symbol:
        raise UnitSyntaxError(f"empty unit term in {term!r}")
    power = int(exponent) * sign if exponent else 1
    factor, dims = lookup(symbol)
    return factor**power, {dim: p * power for dim, p in dims.items()}


def parse_unit(text: str) -> Unit:
    """Parse a unit expression into its SI factor and dimension exponents."""
    compact = text.replace(" ", "")
    if compact.count("/") > 1:
        raise UnitSyntaxError(f"{text!r}: use at most one '/' (write kg/m/s as kg/(m*s) -> kg/m*s)")
    numerator, _, denominator = compact.partition("/")
    factor = 1.0
    dims: Dims = {}
    for part, sign in ((numerator, 1), (denominator, -1)):
        if not part:
            continue
        for term in part.split("*"):
            term_factor, term_dims = _term(term, sign)
            factor *= term_factor
            for dim, power in term_dims.items():
                dims[dim] = dims.get(dim, 0) + power
    return Unit(factor, tuple(sorted((d, p) for d, p in dims.items() if p != 0)))
