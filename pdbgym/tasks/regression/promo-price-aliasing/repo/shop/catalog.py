"""The product catalogue, loaded once and shared by every checkout."""

from __future__ import annotations

from decimal import Decimal


class UnknownProduct(KeyError):
    """A SKU that is not in the catalogue."""


class Catalog:
    """SKU -> product record {"sku", "name", "category", "price", "cost"} (prices in Decimal euros).

    Records are shared, not copied: callers must treat them as read-only.
    """

    def __init__(self, rows: list[tuple[str, str, str, str, str]]) -> None:
        self._products = {
            sku: {"sku": sku, "name": name, "category": category, "price": Decimal(price), "cost": Decimal(cost)}
            for sku, name, category, price, cost in rows
        }

    def get(self, sku: str) -> dict:
        if sku not in self._products:
            raise UnknownProduct(f"no product with SKU {sku!r}")
        return self._products[sku]

    def __len__(self) -> int:
        return len(self._products)
