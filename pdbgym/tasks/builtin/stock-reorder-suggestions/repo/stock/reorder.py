"""Suggest purchase orders for items whose inventory position fell to the reorder point."""

from __future__ import annotations

import math
from dataclasses import dataclass

from stock.items import Item
from stock.warehouse import Warehouse

COVER_DAYS = 14  # order enough to cover this many days of demand above the reorder point


@dataclass(frozen=True)
class PurchaseSuggestion:
    sku: str
    quantity: int
    position: int


def inventory_position(item: Item) -> int:
    """Stock we can count on: what is free on the shelf plus what is already on its way."""
    return item.on_hand - item.reserved - item.on_order


def order_quantity(item: Item, position: int) -> int:
    target = item.reorder_point + math.ceil(item.daily_demand * COVER_DAYS)
    shortfall = max(target - position, 0)
    packs = math.ceil(shortfall / item.order_multiple)
    return packs * item.order_multiple


def suggest_purchases(warehouse: Warehouse) -> list[PurchaseSuggestion]:
    suggestions = []
    for sku in sorted(warehouse.items):
        item = warehouse.items[sku]
        position = inventory_position(item)
        if position > item.reorder_point:
            continue
        quantity = order_quantity(item, position)
        if quantity:
            suggestions.append(PurchaseSuggestion(sku, quantity, position))
    return suggestions
