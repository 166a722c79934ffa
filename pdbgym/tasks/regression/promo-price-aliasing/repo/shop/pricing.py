"""Today's selling prices: list price with any matching promotion applied."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


@dataclass(frozen=True)
class Promotion:
    code: str
    category: str  # the promotion covers every product of this category
    percent_off: int

    def applies_to(self, product: dict) -> bool:
        return product["category"] == self.category


def discounted(price: Decimal, percent_off: int) -> Decimal:
    """``price`` reduced by ``percent_off`` percent, rounded half-up to the cent."""
    return (price * (100 - percent_off) / 100).quantize(CENT, rounding=ROUND_HALF_UP)


def selling_price(product: dict, promotions: list[Promotion]) -> dict:
    """The product as sold today: its record with ``price`` after promotions and ``promo`` codes."""
    product.setdefault("promo", [])
    for promotion in promotions:
        if promotion.applies_to(product):
            product["price"] = discounted(product["price"], promotion.percent_off)
            product["promo"] = [*product["promo"], promotion.code]
    return product
