"""Incoming orders."""

from __future__ import annotations

from dataclasses import dataclass


class OrderError(ValueError):
    """An order that cannot be fulfilled as written."""


@dataclass(frozen=True)
class Order:
    order_id: str
    zone: str  # delivery zone, e.g. "north"
    lines: tuple[tuple[str, int], ...]  # (sku, quantity)


def parse_order(data: dict) -> Order:
    """An Order from {"id", "zone", "lines": [{"sku", "qty"}]}; quantities must be positive ints."""
    try:
        lines = tuple((line["sku"], line["qty"]) for line in data["lines"])
        order = Order(data["id"], data["zone"], lines)
    except (KeyError, TypeError) as exc:
        raise OrderError(f"order {data.get('id', '?')}: missing field {exc}") from exc
    bad = [sku for sku, qty in order.lines if not isinstance(qty, int) or qty <= 0]
    if bad:
        raise OrderError(f"order {order.order_id}: quantities must be positive integers for {bad}")
    return order
