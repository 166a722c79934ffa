"""Validate many rows and report problems with their position."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rowcheck.schema import Schema


@dataclass(frozen=True)
class Problem:
    line: int  # 1-based, counting the header as line 1
    field: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field} {self.message}"


def validate_rows(schema: Schema, rows: Iterable[dict[str, str]], first_line: int = 2) -> list[Problem]:
    problems = []
    for line, row in enumerate(rows, start=first_line):
        unknown = sorted(set(row) - set(schema.fields))
        for name in unknown:
            problems.append(Problem(line, name, "is not a known column"))
        for field, messages in schema.errors(row).items():
            problems.extend(Problem(line, field, message) for message in messages)
    return problems
