"""Ticket prices in cents."""

from __future__ import annotations

BASE_PRICE_CENTS = 1200
PREMIUM_ROWS_FROM_BACK = 3
PREMIUM_SURCHARGE_CENTS = 300
CONCESSIONS = {"adult": 1.0, "child": 0.6, "senior": 0.75, "student": 0.8}


def price_for(row: str, row_labels: list[str], concession: str = "adult") -> int:
    """Price of one seat: the back rows carry a surcharge; concessions scale the base price."""
    if concession not in CONCESSIONS:
        raise ValueError(f"unknown concession {concession!r}; use one of {sorted(CONCESSIONS)}")
    base = round(BASE_PRICE_CENTS * CONCESSIONS[concession])
    premium = row in row_labels[-PREMIUM_ROWS_FROM_BACK:]
    return base + (PREMIUM_SURCHARGE_CENTS if premium else 0)
