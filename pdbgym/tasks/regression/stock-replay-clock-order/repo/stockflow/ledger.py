"""Stock levels per SKU; a shipment can never take more than is on hand."""

from __future__ import annotations

from stockflow.events import Movement


class NegativeStock(ValueError):
    """A shipment or adjustment that would take a SKU below zero."""


class StockLedger:
    def __init__(self, opening: dict[str, int] | None = None) -> None:
        self.levels: dict[str, int] = dict(opening or {})

    def apply(self, movement: Movement) -> None:
        """receive adds, ship subtracts, adjust adds a signed correction (stock counts)."""
        change = -movement.quantity if movement.kind == "ship" else movement.quantity
        level = self.levels.get(movement.sku, 0) + change
        if level < 0:
            raise NegativeStock(
                f"{movement.day} {movement.clock}: {movement.kind} {movement.quantity} {movement.sku} "
                f"with {self.levels.get(movement.sku, 0)} on hand (log line {movement.line_no})"
            )
        self.levels[movement.sku] = level
