"""Journals for supplier invoices whose cost is shared between cost centres."""

from __future__ import annotations

from dataclasses import dataclass

from costsplit.allocation import split_cents
from costsplit.ledger import Journal, JournalLine, Ledger


@dataclass(frozen=True)
class SharedInvoice:
    supplier: str
    number: str
    total_cents: int
    expense_account: str  # e.g. "6100-software"


def shared_invoice_journal(invoice: SharedInvoice, headcount: dict[str, int]) -> Journal:
    """Debit each cost centre's expense by headcount share; credit the supplier's payable in full."""
    shares = split_cents(invoice.total_cents, headcount)
    lines = [JournalLine(f"{invoice.expense_account}/{centre}", debit_cents=cents)
             for centre, cents in sorted(shares.items()) if cents]
    lines.append(JournalLine(f"2000-payables/{invoice.supplier}", credit_cents=invoice.total_cents))
    return Journal(f"{invoice.supplier} {invoice.number}", lines)


def post_shared_invoices(ledger: Ledger, invoices: list[SharedInvoice], headcount: dict[str, int]) -> None:
    """Post every invoice's journal in order."""
    for invoice in invoices:
        ledger.post(shared_invoice_journal(invoice, headcount))
