"""The ticket record."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    OPEN = "open"
    IN_PROGRESS = "in_progress"
    DONE = "done"


@dataclass
class Ticket:
    id: int
    title: str
    status: Status = Status.OPEN
    assignee: str | None = None
    blocked_by: list[int] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)

    @property
    def is_open(self) -> bool:
        return self.status is not Status.DONE

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ticket:
        return cls(
            id=int(data["id"]),
            title=data["title"],
            status=Status(data.get("status", "open")),
            assignee=data.get("assignee"),
            blocked_by=list(data.get("blocked_by", [])),
            labels=list(data.get("labels", [])),
        )
