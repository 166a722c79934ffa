"""Path-level differences between two documents."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from docpath.flatten import flatten
from docpath.paths import parse_path

_MISSING = object()


@dataclass(frozen=True)
class Change:
    path: str
    kind: str  # "added" | "removed" | "changed"
    old: Any = None
    new: Any = None

    def __str__(self) -> str:
        if self.kind == "added":
            return f"+ {self.path} = {self.new!r}"
        if self.kind == "removed":
            return f"- {self.path} (was {self.old!r})"
        return f"~ {self.path}: {self.old!r} -> {self.new!r}"


def _sort_key(path: str) -> tuple[str, ...]:
    # Compare index parts numerically ("[10]" after "[9]") while keeping the key homogeneous.
    return tuple(f"{part:010d}" if isinstance(part, int) else part for part in parse_path(path))


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    before, after = flatten(old), flatten(new)
    changes = []
    for path in sorted(before.keys() | after.keys(), key=_sort_key):
        was, now = before.get(path, _MISSING), after.get(path, _MISSING)
        if was is _MISSING:
            changes.append(Change(path, "added", new=now))
        elif now is _MISSING:
            changes.append(Change(path, "removed", old=was))
        elif was != now or type(was) is not type(now):
            changes.append(Change(path, "changed", was, now))
    return changes
