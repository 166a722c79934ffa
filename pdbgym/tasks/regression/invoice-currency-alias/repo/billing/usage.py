"""Read usage exports (CSV) from the metering systems into plain records.

Each metering system names its columns differently, so header cells are normalised and then
mapped through COLUMN_ALIASES onto our field names. Columns we do not know are kept as they are,
because downstream steps (regions, notes) use some of them.
"""

from __future__ import annotations

import csv
import io
from decimal import Decimal, InvalidOperation

COLUMN_ALIASES = {
    "account": "account",
    "account_id": "account",
    "customer": "account",
    "sku": "sku",
    "product_code": "sku",
    "quantity": "quantity",
    "qty": "quantity",
    "units_used": "quantity",
    "currency": "currency",
    "currency_code": "currency",
    "ccy": "currency",
    "period": "period",
    "billing_period": "period",
}
TYPED_FIELDS = ("account", "sku", "quantity")


class UsageFormatError(ValueError):
    """The export cannot be read: a needed column is missing or a cell is malformed."""


def normalise_column(name: str) -> str:
    """Lower-case a header cell and turn spaces and dashes into underscores."""
    return name.strip().lower().replace(" ", "_").replace("-", "_")


def header_fields(header: list[str]) -> list[str]:
    """Our field name for each header cell, in column order."""
    fields = []
    for raw in header:
        fields.append(COLUMN_ALIASES.get(raw, normalise_column(raw)))
    return fields


def parse_usage(text: str) -> list[dict]:
    """Parse a CSV export into records with a Decimal ``quantity``; other cells stay strings."""
    rows = list(csv.reader(io.StringIO(text.strip())))
    if not rows:
        raise UsageFormatError("empty usage export")
    fields = header_fields(rows[0])
    missing = [name for name in TYPED_FIELDS if name not in fields]
    if missing:
        raise UsageFormatError(f"usage export lacks columns {missing}; header was {rows[0]}")
    records = []
    for line_no, row in enumerate(rows[1:], start=2):
        if len(row) != len(fields):
            raise UsageFormatError(f"line {line_no}: expected {len(fields)} cells, got {len(row)}")
        record = {name: cell.strip() for name, cell in zip(fields, row)}
        try:
            record["quantity"] = Decimal(record["quantity"])
        except InvalidOperation as exc:
            raise UsageFormatError(f"line {line_no}: bad quantity {record['quantity']!r}") from exc
        records.append(record)
    return records
