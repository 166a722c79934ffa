"""A change feed: every write, in order, with a cursor for consumers that poll."""

from __future__ import annotations

from dataclasses import dataclass

from docstore.store import Document, DocumentStore


@dataclass(frozen=True)
class Change:
    sequence: int
    key: str
    revision: int | None  # None for a deletion


class ChangeFeed:
    def __init__(self, store: DocumentStore) -> None:
        self._changes: list[Change] = []
        store.subscribe(self._record)

    def _record(self, key: str, document: Document | None) -> None:
        revision = None if document is None else document.revision
        self._changes.append(Change(len(self._changes) + 1, key, revision))

    def since(self, cursor: int, limit: int = 100) -> tuple[list[Change], int]:
        """Changes after ``cursor`` and the cursor to pass next time."""
        batch = [change for change in self._changes if change.sequence > cursor][:limit]
        return batch, batch[-1].sequence if batch else cursor

    def latest_revisions(self) -> dict[str, int]:
        """Key -> newest revision, for keys that still exist."""
        latest: dict[str, int] = {}
        for change in self._changes:
            if change.revision is None:
                latest.pop(change.key, None)
            else:
                latest[change.key] = change.revision
        return latest
