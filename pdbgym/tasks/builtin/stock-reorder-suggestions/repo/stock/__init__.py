"""stock: items, warehouse movements and reorder suggestions."""

from stock.items import Item
from stock.reorder import PurchaseSuggestion, suggest_purchases
from stock.warehouse import StockError, Warehouse

__all__ = ["Item", "PurchaseSuggestion", "StockError", "Warehouse", "suggest_purchases"]
