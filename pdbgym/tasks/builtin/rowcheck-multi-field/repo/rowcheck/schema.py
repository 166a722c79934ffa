"""Compile a declarative schema into per-field check functions.

A spec maps a field name to a list of rules; a rule is a name or a (name, *args) tuple::

    {"email": ["required", "email"], "age": [("between", 0, 130)]}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rowcheck.rules import FACTORIES, Rule

FieldCheck = Callable[[dict[str, str]], list[str]]


class SchemaError(ValueError):
    """The schema spec itself is invalid."""


def build_rule(spec: Any) -> Rule:
    name, *args = (spec,) if isinstance(spec, str) else spec
    if name not in FACTORIES:
        raise SchemaError(f"unknown rule {name!r}; known rules: {', '.join(sorted(FACTORIES))}")
    return FACTORIES[name](*args)


class Schema:
    def __init__(self, spec: dict[str, list[Any]]) -> None:
        self.fields = list(spec)
        self.checks: list[tuple[str, FieldCheck]] = []
        for field_name, rule_specs in spec.items():
            rules = [build_rule(rule_spec) for rule_spec in rule_specs]

            def check(row: dict[str, str], rules: list[Rule] = rules) -> list[str]:
                value = row.get(field_name)
                return [message for rule in rules if (message := rule(value)) is not None]

            self.checks.append((field_name, check))

    def errors(self, row: dict[str, str]) -> dict[str, list[str]]:
        """Field name -> messages, for the fields that fail."""
        found = {}
        for field_name, check in self.checks:
            messages = check(row)
            if messages:
                found[field_name] = messages
        return found
