"""Steps and their dependencies."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass


class CycleError(ValueError):
    """The dependencies loop back on themselves."""


@dataclass(frozen=True)
class Step:
    name: str
    duration: int  # minutes
    after: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.duration < 0:
            raise ValueError(f"step {self.name!r} has a negative duration")


def index_steps(steps: Iterable[Step]) -> dict[str, Step]:
    by_name: dict[str, Step] = {}
    for step in steps:
        if step.name in by_name:
            raise ValueError(f"duplicate step {step.name!r}")
        by_name[step.name] = step
    for step in by_name.values():
        missing = [dep for dep in step.after if dep not in by_name]
        if missing:
            raise ValueError(f"step {step.name!r} depends on unknown steps {missing}")
    return by_name


def topological_order(steps: Iterable[Step]) -> list[Step]:
    """Kahn's algorithm; among ready steps the alphabetically first goes first, so output is stable."""
    by_name = index_steps(steps)
    waiting_on = {name: set(step.after) for name, step in by_name.items()}
    dependants: dict[str, list[str]] = {name: [] for name in by_name}
    for name, step in by_name.items():
        for dep in step.after:
            dependants[dep].append(name)
    ready = [name for name, deps in waiting_on.items() if not deps]
    heapq.heapify(ready)
    order = []
    while ready:
        name = heapq.heappop(ready)
        order.append(by_name[name])
        for child in dependants[name]:
            waiting_on[child].discard(name)
            if not waiting_on[child]:
                heapq.heappush(ready, child)
    if len(order) != len(by_name):
        stuck = sorted(name for name, deps in waiting_on.items() if deps)
        raise CycleError(f"dependency cycle among steps {stuck}")
    return order
