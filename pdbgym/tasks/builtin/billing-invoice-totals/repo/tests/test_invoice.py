import pytest

from billing import Invoice, tax_cents


def test_tax_rounds_half_up():
    assert tax_cents(1000, "CA") == 73  # 72.5 -> 73
    with pytest.raises(ValueError, match="no tax rate for region 'ZZ'"):
        tax_cents(100, "ZZ")


def test_invoice_with_discount_and_untaxed_line():
    invoice = Invoice("NY", discount_percent=10)
    invoice.add("Desk", "250.00")
    invoice.add("Delivery", 40, taxable=False)
    # subtotal 29000, discount 2900, tax on 22500 at 4% = 900
    assert invoice.total_cents() == 27000
    assert invoice.installments(4) == [6750, 6750, 6750, 6750]


def test_invoice_from_catalogue_prices():
    invoice = Invoice("OR")
    invoice.add("Cable tie (100)", 4.35, quantity=3)
    invoice.add("Label tape", 19.99, quantity=2)
    assert invoice.summary() == ["3 x Cable tie (100): $13.05", "2 x Label tape: $39.98", "Total: $53.03"]
