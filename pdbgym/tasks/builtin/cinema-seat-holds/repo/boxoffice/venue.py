"""The seat map of one auditorium: rows labelled A, B, C..., seats numbered from 1."""

from __future__ import annotations

import string


def parse_seat(label: str) -> tuple[str, int]:
    """'C12' -> ('C', 12)."""
    label = label.strip().upper()
    row, number = label[:1], label[1:]
    if not row.isalpha() or not number.isdigit():
        raise ValueError(f"seat label {label!r} must look like 'C12'")
    return row, int(number)


class SeatMap:
    def __init__(self, rows: int, seats_per_row: int) -> None:
        if not 1 <= rows <= 26:
            raise ValueError(f"rows must be between 1 and 26, got {rows}")
        if seats_per_row < 1:
            raise ValueError(f"seats_per_row must be positive, got {seats_per_row}")
        self.row_labels = list(string.ascii_uppercase[:rows])
        self.seats_per_row = seats_per_row
        self._taken: dict[str, set[int]] = dict.fromkeys(self.row_labels, set())

    @property
    def capacity(self) -> int:
        return len(self.row_labels) * self.seats_per_row

    def _check(self, row: str, number: int) -> None:
        if row not in self._taken or not 1 <= number <= self.seats_per_row:
            raise ValueError(f"no seat {row}{number} in this auditorium")

    def is_free(self, seat: str) -> bool:
        row, number = parse_seat(seat)
        self._check(row, number)
        return number not in self._taken[row]

    def take(self, seat: str) -> None:
        row, number = parse_seat(seat)
        self._check(row, number)
        self._taken[row].add(number)

    def release(self, seat: str) -> None:
        row, number = parse_seat(seat)
        self._check(row, number)
        self._taken[row].discard(number)

    def free_in_row(self, row: str) -> list[int]:
        return [n for n in range(1, self.seats_per_row + 1) if n not in self._taken[row]]

    def free_count(self) -> int:
        return sum(len(self.free_in_row(row)) for row in self.row_labels)

    def best_block(self, size: int) -> list[str] | None:
        """The first run of ``size`` adjacent free seats, searching from the back row forward."""
        for row in reversed(self.row_labels):
            free = self.free_in_row(row)
            for start in free:
                block = list(range(start, start + size))
                if all(n in free for n in block):
                    return [f"{row}{n}" for n in block]
        return None
