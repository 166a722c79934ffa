"""The job record and its life cycle."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class JobState(Enum):
    QUEUED = "queued"
    LEASED = "leased"
    DONE = "done"
    EXPIRED = "expired"


@dataclass
class Job:
    job_id: str
    priority: int = 0  # higher runs first
    deadline: float | None = None  # seconds on the queue's clock; None = never expires
    payload: dict[str, Any] = field(default_factory=dict)
    state: JobState = JobState.QUEUED
    lease_until: float | None = None
    attempts: int = 0

    def is_expired(self, now: float) -> bool:
        return self.deadline is not None and now >= self.deadline

    def sort_key(self, sequence: int) -> tuple[int, float, int]:
        """Higher priority first, then earlier deadline, then submission order."""
        deadline = self.deadline if self.deadline is not None else float("inf")
        return (-self.priority, deadline, sequence)
