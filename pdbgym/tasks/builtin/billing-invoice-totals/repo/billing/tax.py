"""Sales tax by region, in basis points (1 bp = 0.01 %)."""

from __future__ import annotations

TAX_RATES_BP: dict[str, int] = {
    "CA": 725,
    "NY": 400,
    "TX": 625,
    "OR": 0,
    "WA": 650,
}


def tax_cents(taxable_cents: int, region: str) -> int:
    """Tax on an amount, rounded half up to the cent."""
    if region not in TAX_RATES_BP:
        raise ValueError(f"no tax rate for region {region!r}; known: {', '.join(sorted(TAX_RATES_BP))}")
    return (taxable_cents * TAX_RATES_BP[region] + 5_000) // 10_000
