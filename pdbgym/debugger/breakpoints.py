"""Breakpoints as the session tracks them, and how an edit moves them (pure functions, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Breakpoint:
    """A pdb breakpoint. ``file`` is repo-relative inside the workspace, else absolute; lines 1-based.

    ``funcname`` is set for breakpoints made with ``b function``: pdb keys them on the ``def`` line
    and stops at the function's first executed line.
    """

    file: str
    line: int
    condition: str | None = None
    enabled: bool = True
    temporary: bool = False
    funcname: str | None = None

    def describe(self) -> str:
        where = f"{self.file}:{self.line}"
        extras = [f"if {self.condition}"] if self.condition else []
        if self.funcname:
            extras.append(f"function {self.funcname}")
        if not self.enabled:
            extras.append("disabled")
        if self.temporary:
            extras.append("temporary")
        return where + (f" ({', '.join(extras)})" if extras else "")


@dataclass(frozen=True)
class Edit:
    """Lines ``first_line..last_line`` (1-based, inclusive) of ``path`` became ``new_line_count`` lines.

    An insertion before line k is ``first_line=k, last_line=k-1``.
    """

    path: str
    first_line: int
    last_line: int
    new_line_count: int

    @property
    def line_delta(self) -> int:
        """How far lines after the edited range move (positive: down)."""
        return self.new_line_count - (self.last_line - self.first_line + 1)


def shift_line(line: int, edit: Edit) -> int | None:
    """Where ``line`` of the edited file is after ``edit``; None when the edit removed that line.

    Lines before the range stay; lines after it move by ``edit.line_delta``. A line inside the range
    keeps its place while the replacement is at least that long (it was rewritten, not removed) and
    is dropped when the replacement is shorter than its offset into the range.
    """
    if line < edit.first_line:
        return line
    if line > edit.last_line:
        return line + edit.line_delta
    offset = line - edit.first_line
    return line if offset < edit.new_line_count else None


def shift_breakpoints(
    breakpoints: list[Breakpoint], edits: list[Edit]
) -> tuple[list[Breakpoint], list[tuple[Breakpoint, Breakpoint | None]]]:
    """Apply ``edits`` in order. Returns (kept breakpoints, [(before, after or None if dropped)])."""
    kept: list[Breakpoint] = []
    changes: list[tuple[Breakpoint, Breakpoint | None]] = []
    for original in breakpoints:
        current: Breakpoint | None = original
        for edit in edits:
            if current is None or current.file != edit.path:
                continue
            new_line = shift_line(current.line, edit)
            current = None if new_line is None else replace(current, line=new_line)
        if current is not None:
            kept.append(current)
        if current != original:
            changes.append((original, current))
    return kept, changes
