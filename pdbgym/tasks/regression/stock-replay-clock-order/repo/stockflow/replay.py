"""Rebuild end-of-day stock from opening levels and the movement log."""

from __future__ import annotations

from collections import Counter

from stockflow.events import chronological, parse_log
from stockflow.ledger import StockLedger


def replay(opening: dict[str, int], log_text: str) -> dict[str, int]:
    """Closing levels after applying every logged movement in time order."""
    ledger = StockLedger(opening)
    for movement in chronological(parse_log(log_text)):
        ledger.apply(movement)
    return ledger.levels


def shipped_per_sku(log_text: str) -> Counter:
    """Units shipped per SKU over the whole log."""
    shipped: Counter = Counter()
    for movement in parse_log(log_text):
        if movement.kind == "ship":
            shipped[movement.sku] += movement.quantity
    return shipped
