"""Price usage records against a tariff."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


class UnknownSku(KeyError):
    """A usage record names a SKU the tariff does not price."""


def rate(records: list[dict], tariff: dict[str, Decimal]) -> list[dict]:
    """Return one invoice line per record: the record plus ``unit_price`` and ``amount``.

    ``amount`` = quantity * unit_price, rounded half-up to the cent.
    """
    lines = []
    for record in records:
        sku = record["sku"]
        if sku not in tariff:
            raise UnknownSku(f"no price for SKU {sku!r} (account {record['account']})")
        unit_price = tariff[sku]
        amount = (record["quantity"] * unit_price).quantize(CENT, rounding=ROUND_HALF_UP)
        lines.append({**record, "unit_price": unit_price, "amount": amount})
    return lines


def totals_by_account(lines: list[dict]) -> dict[str, Decimal]:
    """Sum of line amounts per account (currencies are not mixed within one account)."""
    totals: dict[str, Decimal] = {}
    for line in lines:
        totals[line["account"]] = totals.get(line["account"], Decimal("0")) + line["amount"]
    return totals
