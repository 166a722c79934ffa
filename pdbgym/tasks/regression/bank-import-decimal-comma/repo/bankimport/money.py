"""Canonical money amounts as integer cents.

The canonical text form is ``-1234.5`` / ``1234.50``: optional minus, digits, optional '.'
and at most two decimals. Bank-specific punctuation is the reader's job; this module never
guesses, because ``1,234`` means 1234 at one bank and 1.234 at another.
"""

from __future__ import annotations

import re

_CANONICAL = re.compile(r"-?\d+(\.\d{1,2})?")


class AmountError(ValueError):
    """Text that is not a canonical amount."""


def parse_amount(text: str) -> int:
    """Canonical amount text -> integer cents (``'-12.5'`` -> ``-1250``)."""
    text = text.strip()
    if not _CANONICAL.fullmatch(text):
        raise AmountError(f"{text!r} is not a canonical amount (digits, optional '.', up to 2 decimals)")
    negative = text.startswith("-")
    units, _, decimals = text.lstrip("-").partition(".")
    cents = int(units) * 100 + int(decimals.ljust(2, "0") or "0")
    return -cents if negative else cents


def format_cents(cents: int) -> str:
    """Integer cents -> canonical text with two decimals (``-1250`` -> ``'-12.50'``)."""
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"
