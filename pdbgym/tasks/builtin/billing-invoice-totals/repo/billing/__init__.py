"""billing: invoices, tax and money formatting. All arithmetic is in integer cents."""

from billing.invoice import Invoice, Line
from billing.money import format_cents, to_cents
from billing.tax import TAX_RATES_BP, tax_cents

__all__ = ["Invoice", "Line", "TAX_RATES_BP", "format_cents", "tax_cents", "to_cents"]
