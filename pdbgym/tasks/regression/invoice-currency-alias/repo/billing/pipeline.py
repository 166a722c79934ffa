"""From a usage export to invoice texts in one call."""

from __future__ import annotations

from decimal import Decimal

from billing.invoice import render_invoice
from billing.rating import rate
from billing.usage import parse_usage


def invoices_from_export(export_text: str, tariff: dict[str, Decimal]) -> dict[str, str]:
    """Invoice text per account found in the export, accounts in sorted order."""
    lines = rate(parse_usage(export_text), tariff)
    accounts = sorted({line["account"] for line in lines})
    return {account: render_invoice(account, lines) for account in accounts}
