"""Conversions between prices as people write them and integer cents."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation


def to_cents(amount: int | float | str) -> int:
    """12 -> 1200, 4.35 -> 435, "1,299.90" -> 129990."""
    if isinstance(amount, str):
        text = amount.replace(",", "").replace("$", "").strip()
        try:
            value = Decimal(text)
        except InvalidOperation:
            raise ValueError(f"not a price: {amount!r}") from None
        return int((value * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    if isinstance(amount, int):
        return amount * 100
    return int(amount * 100)


def format_cents(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    whole, fraction = divmod(abs(cents), 100)
    return f"{sign}${whole:,}.{fraction:02d}"


def split_evenly(cents: int, parts: int) -> list[int]:
    """Split an amount into ``parts`` shares that differ by at most one cent and sum exactly."""
    if parts < 1:
        raise ValueError("parts must be >= 1")
    share, remainder = divmod(cents, parts)
    return [share + 1 if index < remainder else share for index in range(parts)]
