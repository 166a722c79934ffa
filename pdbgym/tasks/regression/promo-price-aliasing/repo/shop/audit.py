"""Margin audit: nothing may be sold below cost plus the minimum margin."""

from __future__ import annotations

from decimal import Decimal

MIN_MARGIN = Decimal("0.05")  # 5 % over cost


class MarginViolation(ValueError):
    """A line would sell a product below cost plus the minimum margin."""


def check_margins(lines: list[dict]) -> None:
    """Raise MarginViolation for the first line priced under cost * (1 + MIN_MARGIN)."""
    for line in lines:
        floor = line["cost"] * (1 + MIN_MARGIN)
        if line["unit_price"] < floor:
            raise MarginViolation(
                f"{line['sku']} at {line['unit_price']} is under its floor {floor:.2f} "
                f"(cost {line['cost']}, promotions {line['promo']})"
            )
