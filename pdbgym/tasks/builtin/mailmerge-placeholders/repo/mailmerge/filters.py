"""Filters applied to a value before it is written into the message."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def money(value: Any) -> str:
    return f"${float(value):,.2f}"


def title(value: Any) -> str:
    return str(value).title()


def first_name(value: Any) -> str:
    return str(value).split()[0] if str(value).strip() else ""


FILTERS: dict[str, Callable[[Any], Any]] = {
    "upper": lambda value: str(value).upper(),
    "lower": lambda value: str(value).lower(),
    "title": title,
    "money": money,
    "first_name": first_name,
}
