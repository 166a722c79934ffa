"""Turn a cart into an order: price each line, audit margins, total."""

from __future__ import annotations

from decimal import Decimal

from shop.audit import check_margins
from shop.catalog import Catalog
from shop.pricing import Promotion, selling_price


def checkout(cart: dict[str, int], catalog: Catalog, promotions: list[Promotion]) -> dict:
    """An order {"lines": [...], "total": Decimal} for a cart of SKU -> quantity."""
    lines = []
    for sku, quantity in sorted(cart.items()):
        product = selling_price(catalog.get(sku), promotions)
        lines.append({"sku": sku, "quantity": quantity, "unit_price": product["price"],
                      "cost": product["cost"], "promo": product["promo"],
                      "amount": product["price"] * quantity})
    check_margins(lines)
    return {"lines": lines, "total": sum((line["amount"] for line in lines), Decimal("0"))}
