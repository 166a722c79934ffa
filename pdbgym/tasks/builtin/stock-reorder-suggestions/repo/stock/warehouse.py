"""Stock movements. Every change goes through here so the counters stay consistent."""

from __future__ import annotations

from stock.items import Item


class StockError(Exception):
    """A movement would leave an item in an impossible state."""


class Warehouse:
    def __init__(self, items: list[Item] | None = None) -> None:
        self.items: dict[str, Item] = {item.sku: item for item in items or []}
        self.journal: list[tuple[str, str, int]] = []

    def item(self, sku: str) -> Item:
        if sku not in self.items:
            raise StockError(f"unknown SKU {sku!r}")
        return self.items[sku]

    def _log(self, kind: str, sku: str, quantity: int) -> None:
        if quantity <= 0:
            raise StockError(f"{kind} quantity must be positive, got {quantity}")
        self.journal.append((kind, sku, quantity))

    def reserve(self, sku: str, quantity: int) -> None:
        item = self.item(sku)
        if quantity > item.available:
            raise StockError(f"only {item.available} of {sku} available, {quantity} requested")
        self._log("reserve", sku, quantity)
        item.reserved += quantity

    def ship(self, sku: str, quantity: int) -> None:
        """Ship reserved units."""
        item = self.item(sku)
        if quantity > item.reserved:
            raise StockError(f"cannot ship {quantity} of {sku}: only {item.reserved} reserved")
        self._log("ship", sku, quantity)
        item.reserved -= quantity
        item.on_hand -= quantity

    def place_purchase(self, sku: str, quantity: int) -> None:
        self._log("purchase", sku, quantity)
        self.item(sku).on_order += quantity

    def receive(self, sku: str, quantity: int) -> None:
        item = self.item(sku)
        self._log("receive", sku, quantity)
        item.on_order = max(0, item.on_order - quantity)
        item.on_hand += quantity
