"""Invoices: lines, an optional percentage discount, tax, totals."""

from __future__ import annotations

from dataclasses import dataclass, field

from billing.money import format_cents, split_evenly, to_cents
from billing.tax import tax_cents


@dataclass(frozen=True)
class Line:
    description: str
    unit_price: int | float | str
    quantity: int = 1
    taxable: bool = True

    @property
    def amount_cents(self) -> int:
        return to_cents(self.unit_price) * self.quantity


@dataclass
class Invoice:
    region: str
    lines: list[Line] = field(default_factory=list)
    discount_percent: int = 0

    def add(self, description: str, unit_price: int | float | str, quantity: int = 1, taxable: bool = True) -> None:
        if quantity < 1:
            raise ValueError(f"quantity must be >= 1 for {description!r}")
        self.lines.append(Line(description, unit_price, quantity, taxable))

    def subtotal_cents(self) -> int:
        return sum(line.amount_cents for line in self.lines)

    def discount_cents(self) -> int:
        return self.subtotal_cents() * self.discount_percent // 100

    def tax_cents(self) -> int:
        taxable = sum(line.amount_cents for line in self.lines if line.taxable)
        # The discount applies proportionally to taxable and non-taxable lines.
        taxable -= taxable * self.discount_percent // 100
        return tax_cents(taxable, self.region)

    def total_cents(self) -> int:
        return self.subtotal_cents() - self.discount_cents() + self.tax_cents()

    def installments(self, count: int) -> list[int]:
        return split_evenly(self.total_cents(), count)

    def summary(self) -> list[str]:
        rows = [f"{line.quantity} x {line.description}: {format_cents(line.amount_cents)}" for line in self.lines]
        rows.append(f"Total: {format_cents(self.total_cents())}")
        return rows
