"""Read one bank statement export into transactions."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import date, datetime

from bankimport.formats import StatementFormat, detect_format
from bankimport.money import parse_amount


@dataclass(frozen=True)
class Transaction:
    booked: date
    payee: str
    cents: int


def canonical_amount(cell: str, fmt: StatementFormat) -> str:
    """A bank's amount text in canonical form: grouping removed, '.' as the decimal point."""
    text = cell.strip().replace(" ", "")
    if fmt.thousands_sep and fmt.thousands_sep in text:
        text = text.replace(fmt.thousands_sep, "").replace(fmt.decimal_sep, ".")
    return text


def read_statement(text: str) -> list[Transaction]:
    """Transactions of a statement: format line, header row, then rows of date, payee, amount."""
    first_line, _, body = text.strip().partition("\n")
    fmt = detect_format(first_line)
    transactions = []
    rows = list(csv.reader(io.StringIO(body), delimiter=fmt.delimiter))
    for row in rows[1:]:  # every bank puts a header row (in its own language) first
        if not row:
            continue
        booked = datetime.strptime(row[0].strip(), fmt.date_format).date()
        cents = parse_amount(canonical_amount(row[2], fmt))
        transactions.append(Transaction(booked, row[1].strip(), cents))
    return transactions
