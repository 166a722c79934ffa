"""Decide which warehouse ships how much of each order line: nearest stock first."""

from __future__ import annotations

from dataclasses import dataclass

from fulfil.orders import Order
from fulfil.stock import warehouses_by_distance


@dataclass(frozen=True)
class Allocation:
    order_id: str
    warehouse: str
    sku: str
    quantity: int


class InsufficientStock(RuntimeError):
    """All warehouses together hold less than an order line needs."""


def allocate(order: Order, stock: dict[str, dict[str, int]]) -> list[Allocation]:
    """Allocations for every line, drawing from the nearest warehouses first.

    ``stock`` is warehouse -> sku -> units on hand; it is decremented in place so that
    successive orders see what earlier ones took.
    """
    allocations: list[Allocation] = []
    for sku, quantity in order.lines:
        on_hand = sum(stock.get(warehouse, {}).get(sku, 0) for warehouse in stock)
        if on_hand < quantity:
            raise InsufficientStock(f"order {order.order_id}: {sku} needs {quantity}, only {on_hand} in stock")
        remaining = quantity
        for warehouse in warehouses_by_distance(order.zone):
            take = min(stock.get(warehouse, {}).get(sku, 0), remaining)
            allocations.append(Allocation(order.order_id, warehouse, sku, take))
            if take:
                stock[warehouse][sku] -= take
            remaining -= take
            if remaining == 0:
                break
    return allocations
