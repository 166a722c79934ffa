"""Domain objects as the order service holds them (Decimal euros, aware datetimes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal


@dataclass(frozen=True)
class Refund:
    amount: Decimal
    reason: str
    at: datetime


@dataclass
class Order:
    order_id: str
    customer: str
    total: Decimal
    placed_at: datetime
    refunds: list[Refund] = field(default_factory=list)

    def refunded(self) -> Decimal:
        return sum((refund.amount for refund in self.refunds), Decimal("0"))
