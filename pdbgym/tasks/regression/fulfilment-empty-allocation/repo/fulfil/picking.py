"""Pick lists for warehouse staff and the shipments they produce."""

from __future__ import annotations

from dataclasses import dataclass

from fulfil.allocation import Allocation


class PickError(ValueError):
    """A pick line that pickers cannot carry out."""


@dataclass(frozen=True)
class PickLine:
    order_id: str
    sku: str
    quantity: int

    def __post_init__(self) -> None:
        if self.quantity <= 0:
            raise PickError(f"pick line for {self.sku} (order {self.order_id}) has quantity {self.quantity}")


def pick_lists(allocations: list[Allocation]) -> dict[str, list[PickLine]]:
    """warehouse -> pick lines in allocation order."""
    lists: dict[str, list[PickLine]] = {}
    for allocation in allocations:
        lines = lists.setdefault(allocation.warehouse, [])
        lines.append(PickLine(allocation.order_id, allocation.sku, allocation.quantity))
    return lists


def shipments(allocations: list[Allocation]) -> list[tuple[str, str]]:
    """(order id, warehouse) for every parcel: one per order per shipping warehouse."""
    return sorted({(order_id, warehouse) for warehouse, lines in pick_lists(allocations).items()
                   for order_id in (line.order_id for line in lines)})
