"""Movement log lines: ``2024-03-01 9:30 receive KETTLE 10`` (day, clock, kind, sku, quantity).

Scanners write the clock without a leading zero before 10:00.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("receive", "ship", "adjust")


class LogLineError(ValueError):
    """A movement log line that cannot be read."""


@dataclass(frozen=True)
class Movement:
    day: str  # ISO date
    clock: str  # H:MM or HH:MM, as the scanner wrote it
    kind: str
    sku: str
    quantity: int
    line_no: int


def parse_log(text: str) -> list[Movement]:
    """Movements in file order; blank lines and '#' comments are skipped."""
    movements = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 5 or parts[2] not in KINDS:
            raise LogLineError(f"line {line_no}: expected 'DAY H:MM {'|'.join(KINDS)} SKU QTY', got {raw!r}")
        day, clock, kind, sku, quantity = parts
        movements.append(Movement(day, clock, kind, sku, int(quantity), line_no))
    return movements


def chronological(movements: list[Movement]) -> list[Movement]:
    """Movements in the order they happened (file order breaks ties: scanners batch uploads)."""
    return sorted(movements, key=lambda m: (m.day, m.clock, m.line_no))
