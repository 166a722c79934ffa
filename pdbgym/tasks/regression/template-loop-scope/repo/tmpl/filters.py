"""Filters usable as {{ value | name }}."""

from __future__ import annotations

from decimal import Decimal
from typing import Any


def money(value: Any) -> str:
    """Two decimals with thousands separators: 1234.5 -> '1,234.50'."""
    return f"{Decimal(str(value)):,.2f}"


FILTERS = {
    "upper": lambda value: str(value).upper(),
    "lower": lambda value: str(value).lower(),
    "title": lambda value: str(value).title(),
    "length": len,
    "money": money,
    "join": lambda value: ", ".join(str(item) for item in value),
}
