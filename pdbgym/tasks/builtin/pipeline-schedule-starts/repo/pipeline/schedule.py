"""Earliest-start schedules with unlimited parallelism."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pipeline.graph import Step, topological_order


@dataclass(frozen=True)
class Slot:
    start: int  # minutes from the pipeline's t=0
    end: int


def build_schedule(steps: Iterable[Step], start: int = 0) -> dict[str, Slot]:
    """Each step starts as soon as all the steps it runs after have ended (steps with none at ``start``)."""
    slots: dict[str, Slot] = {}
    for step in topological_order(steps):
        if step.after:
            start = max(slots[dep].end for dep in step.after)
        slots[step.name] = Slot(start, start + step.duration)
    return slots


def makespan(slots: dict[str, Slot]) -> int:
    if not slots:
        return 0
    return max(slot.end for slot in slots.values()) - min(slot.start for slot in slots.values())


def critical_path(steps: Iterable[Step], start: int = 0) -> list[str]:
    """The chain of steps that determines when the pipeline finishes (latest-ending chain)."""
    steps = list(steps)
    by_name = {step.name: step for step in steps}
    slots = build_schedule(steps, start)
    if not slots:
        return []
    name = max(slots, key=lambda n: (slots[n].end, n))
    chain = [name]
    while by_name[name].after:
        name = max(by_name[name].after, key=lambda dep: (slots[dep].end, dep))
        chain.append(name)
    return chain[::-1]
