"""One stocked item and its replenishment parameters."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Item:
    sku: str
    on_hand: int = 0       # physically in the warehouse
    reserved: int = 0      # promised to open customer orders, still on the shelf
    on_order: int = 0      # ordered from the supplier, not yet received
    reorder_point: int = 0
    order_multiple: int = 1  # the supplier sells in packs of this many
    daily_demand: float = 0.0

    @property
    def available(self) -> int:
        """What can still be promised to a new customer today."""
        return self.on_hand - self.reserved
