"""Money on the wire: a string with exactly two decimals, e.g. "12.50"."""

from __future__ import annotations

from decimal import Decimal


class MoneyError(ValueError):
    """An amount that cannot be sent as whole cents."""


def to_api_money(amount: Decimal) -> str:
    """Decimal euros -> "1234.50"; refuses sub-cent amounts instead of rounding them away."""
    if amount != amount.quantize(Decimal("0.01")):
        raise MoneyError(f"{amount} has fractions of a cent; round it where it was computed")
    return f"{amount:.2f}"
