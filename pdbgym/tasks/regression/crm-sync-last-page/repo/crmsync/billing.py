"""Bill metered usage to the customers held in the mirror."""

from __future__ import annotations

from crmsync.mirror import Mirror

PLAN_RATES = {"basic": 2, "pro": 1}  # cents per API call


def bill(mirror: Mirror, usage: dict[str, int]) -> dict[str, int]:
    """customer id -> cents owed for ``usage`` (calls per customer) at the customer's plan rate."""
    invoices = {}
    for customer_id, calls in sorted(usage.items()):
        plan = mirror.customer(customer_id)["plan"]
        invoices[customer_id] = calls * PLAN_RATES[plan]
    return invoices


def invoice_lines(mirror: Mirror, invoices: dict[str, int]) -> list[str]:
    """Printable lines, one per invoice: id, plan and amount in euros, e.g. 'c045  pro    0.10'."""
    lines = []
    for customer_id, cents in sorted(invoices.items()):
        plan = mirror.customer(customer_id)["plan"]
        lines.append(f"{customer_id:<5} {plan:<6} {cents // 100:>3}.{cents % 100:02d}")
    return lines
