"""Post transactions and reconcile against a statement's closing balance."""

from __future__ import annotations

from bankimport.money import format_cents
from bankimport.reader import Transaction


class ReconciliationError(ValueError):
    """The ledger balance does not match the bank's closing balance."""


def balance(opening_cents: int, transactions: list[Transaction]) -> int:
    """Opening balance plus every transaction, in cents."""
    return opening_cents + sum(t.cents for t in transactions)


def reconcile(opening_cents: int, transactions: list[Transaction], closing_cents: int) -> int:
    """The closing balance, or ReconciliationError naming the difference in canonical form."""
    computed = balance(opening_cents, transactions)
    if computed != closing_cents:
        raise ReconciliationError(
            f"ledger says {format_cents(computed)}, bank says {format_cents(closing_cents)} "
            f"(off by {format_cents(closing_cents - computed)})"
        )
    return computed
