"""Render rated lines as a plain-text invoice, one section per currency."""

from __future__ import annotations

from decimal import Decimal

CURRENCY_SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£", "CHF": "CHF "}


def format_money(amount: Decimal, currency: str) -> str:
    """'€1,234.50' style: symbol, thousands separators, two decimals."""
    symbol = CURRENCY_SYMBOLS.get(currency, currency + " ")
    return f"{symbol}{amount:,.2f}"


def group_by_currency(lines: list[dict]) -> dict[str, list[dict]]:
    """Lines grouped by their currency code, codes in first-seen order."""
    groups: dict[str, list[dict]] = {}
    for line in lines:
        groups.setdefault(line["currency"], []).append(line)
    return groups


def render_invoice(account: str, lines: list[dict]) -> str:
    """The invoice text for one account; only that account's lines are listed."""
    own = [line for line in lines if line["account"] == account]
    if not own:
        raise ValueError(f"no billable usage for account {account!r}")
    out = [f"Invoice for {account}"]
    for currency, group in group_by_currency(own).items():
        out.append(f"-- {currency} --")
        for line in group:
            out.append(f"{line['sku']:<12} {line['quantity']:>8} x {line['unit_price']} = "
                       f"{format_money(line['amount'], currency)}")
        subtotal = sum((line["amount"] for line in group), Decimal("0"))
        out.append(f"{'subtotal':<12} {format_money(subtotal, currency)}")
    return "\n".join(out)
