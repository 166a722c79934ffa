from decimal import Decimal

import pytest

from billing.invoice import format_money, render_invoice
from billing.pipeline import invoices_from_export
from billing.rating import UnknownSku, rate, totals_by_account
from billing.usage import UsageFormatError, parse_usage

TARIFF = {"cpu-hours": Decimal("0.042"), "storage-gb": Decimal("0.020"), "egress-gb": Decimal("0.090")}

METER_A = """account,sku,quantity,currency,period
acme,cpu-hours,1200,EUR,2024-05
acme,storage-gb,350.5,EUR,2024-05
globex,egress-gb,80,USD,2024-05
"""

# The newer metering system uses its own column names (and shouts the currency code).
METER_B = """customer,product_code,units_used,CCY,billing_period,region
acme,cpu-hours,100,EUR,2024-06,eu-west
initech,storage-gb,1000,GBP,2024-06,uk-south
"""


def test_parse_meter_a_types_quantity():
    records = parse_usage(METER_A)
    assert [r["account"] for r in records] == ["acme", "acme", "globex"]
    assert records[1]["quantity"] == Decimal("350.5")
    assert records[2]["currency"] == "USD"


def test_rate_rounds_half_up_to_cent():
    lines = rate(parse_usage(METER_A), TARIFF)
    assert lines[0]["amount"] == Decimal("50.40")
    assert lines[1]["amount"] == Decimal("7.01")
    assert totals_by_account(lines) == {"acme": Decimal("57.41"), "globex": Decimal("7.20")}


def test_unknown_sku_is_reported():
    with pytest.raises(UnknownSku, match="gpu-hours"):
        rate(parse_usage("account,sku,quantity,currency,period\nacme,gpu-hours,1,EUR,2024-05"), TARIFF)


def test_missing_quantity_column_is_a_format_error():
    with pytest.raises(UsageFormatError, match="quantity"):
        parse_usage("account,sku,currency\nacme,cpu-hours,EUR")


def test_format_money_thousands():
    assert format_money(Decimal("1234.5"), "EUR") == "€1,234.50"
    assert format_money(Decimal("3"), "SEK") == "SEK 3.00"


def test_invoice_meter_a():
    invoices = invoices_from_export(METER_A, TARIFF)
    assert list(invoices) == ["acme", "globex"]
    assert "subtotal     €57.41" in invoices["acme"]
    assert "-- USD --" in invoices["globex"]


def test_invoice_only_lists_own_lines():
    lines = rate(parse_usage(METER_A), TARIFF)
    text = render_invoice("globex", lines)
    assert "cpu-hours" not in text and "egress-gb" in text


def test_invoice_meter_b_export():
    invoices = invoices_from_export(METER_B, TARIFF)
    assert "subtotal     €4.20" in invoices["acme"]
    assert "subtotal     £20.00" in invoices["initech"]


def test_meter_b_keeps_unknown_columns():
    records = parse_usage(METER_B)
    assert records[0]["region"] == "eu-west"
    assert records[1]["period"] == "2024-06"


def test_meter_b_lines_group_by_currency():
    from billing.invoice import group_by_currency

    groups = group_by_currency(rate(parse_usage(METER_B), TARIFF))
    assert list(groups) == ["EUR", "GBP"]


def test_meter_b_currency_column_is_read():
    assert [r["currency"] for r in parse_usage(METER_B)] == ["EUR", "GBP"]
