from decimal import Decimal

import pytest

from shop.audit import MarginViolation, check_margins
from shop.catalog import Catalog, UnknownProduct
from shop.checkout import checkout
from shop.pricing import Promotion, discounted, selling_price

ROWS = [
    ("TEA-01", "Green tea", "tea", "8.00", "5.00"),
    ("MUG-02", "Mug", "kitchen", "12.00", "6.00"),
    ("POT-03", "Teapot", "kitchen", "30.00", "22.00"),
]
SPRING = [Promotion("SPRING20", "tea", 20)]


def test_discount_rounds_half_up():
    assert discounted(Decimal("9.99"), 15) == Decimal("8.49")


def test_unknown_sku():
    with pytest.raises(UnknownProduct, match="CUP-09"):
        Catalog(ROWS).get("CUP-09")


def test_checkout_without_promotions():
    order = checkout({"MUG-02": 2, "TEA-01": 1}, Catalog(ROWS), [])
    assert order["total"] == Decimal("32.00")


def test_single_checkout_with_promotion():
    order = checkout({"TEA-01": 3}, Catalog(ROWS), SPRING)
    assert order["lines"][0]["unit_price"] == Decimal("6.40")
    assert order["lines"][0]["promo"] == ["SPRING20"]


def test_too_deep_promotion_is_stopped():
    with pytest.raises(MarginViolation, match="POT-03"):
        checkout({"POT-03": 1}, Catalog(ROWS), [Promotion("CLEAR30", "kitchen", 30)])


def test_audit_accepts_exact_floor():
    check_margins([{"sku": "X", "unit_price": Decimal("5.25"), "cost": Decimal("5.00"), "promo": []}])


def test_second_customer_gets_same_price():
    catalog = Catalog(ROWS)
    first = checkout({"TEA-01": 1}, catalog, SPRING)
    second = checkout({"TEA-01": 2}, catalog, SPRING)
    assert second["lines"][0]["unit_price"] == first["lines"][0]["unit_price"] == Decimal("6.40")


def test_busy_day_of_checkouts():
    catalog = Catalog(ROWS)
    totals = [checkout({"TEA-01": 1, "MUG-02": 1}, catalog, SPRING)["total"] for _ in range(3)]
    assert totals == [Decimal("18.40")] * 3


def test_catalog_list_prices_are_kept():
    catalog = Catalog(ROWS)
    selling_price(catalog.get("TEA-01"), SPRING)
    assert catalog.get("TEA-01")["price"] == Decimal("8.00")
