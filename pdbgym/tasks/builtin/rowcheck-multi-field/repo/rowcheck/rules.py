"""Rule factories. A rule takes a cell value (str or None) and returns an error message or None."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

Rule = Callable[[str | None], str | None]


def required() -> Rule:
    def check(value: str | None) -> str | None:
        return "is required" if value is None or not value.strip() else None
    return check


def max_length(limit: int) -> Rule:
    def check(value: str | None) -> str | None:
        if value is not None and len(value) > limit:
            return f"is longer than {limit} characters"
        return None
    return check


def one_of(choices: Iterable[str]) -> Rule:
    allowed = frozenset(choices)
    def check(value: str | None) -> str | None:
        if value and value not in allowed:
            return f"must be one of {', '.join(sorted(allowed))}"
        return None
    return check


def number_between(low: float, high: float) -> Rule:
    def check(value: str | None) -> str | None:
        if not value:
            return None
        try:
            number = float(value)
        except ValueError:
            return "is not a number"
        return None if low <= number <= high else f"must be between {low:g} and {high:g}"
    return check


EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")


def email() -> Rule:
    def check(value: str | None) -> str | None:
        return "is not an e-mail address" if value and not EMAIL.match(value) else None
    return check


FACTORIES: dict[str, Callable[..., Rule]] = {
    "required": required,
    "max_length": max_length,
    "one_of": one_of,
    "between": number_between,
    "email": email,
}
