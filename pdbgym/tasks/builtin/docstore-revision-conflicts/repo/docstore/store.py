"""Documents carry a revision number; writers must name the revision they read (optimistic locking)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class NotFound(KeyError):
    """No document has the given key."""


class ConflictError(Exception):
    """Someone else wrote the document since the caller read it."""

    def __init__(self, key: str, expected: int, actual: int) -> None:
        self.key, self.expected, self.actual = key, expected, actual
        super().__init__(f"{key}: you read revision {expected} but the store holds {actual}; re-read and retry")


@dataclass(frozen=True)
class Document:
    key: str
    revision: int
    body: dict[str, Any]


Listener = Callable[[str, Document | None], None]


class DocumentStore:
    def __init__(self) -> None:
        self._docs: dict[str, Document] = {}
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _publish(self, key: str, document: Document | None) -> None:
        for listener in self._listeners:
            listener(key, document)

    def get(self, key: str) -> Document:
        if key not in self._docs:
            raise NotFound(key)
        document = self._docs[key]
        # Hand out a copy so callers cannot edit the stored body behind the store's back.
        return Document(document.key, document.revision, copy.deepcopy(document.body))

    def create(self, key: str, body: dict[str, Any]) -> Document:
        if key in self._docs:
            raise ConflictError(key, 0, self._docs[key].revision)
        document = Document(key, 1, copy.deepcopy(body))
        self._docs[key] = document
        self._publish(key, document)
        return document

    def _check_revision(self, key: str, expected_revision: int) -> Document:
        current = self._docs.get(key)
        if current is None:
            raise NotFound(key)
        if current.revision is not expected_revision:
            raise ConflictError(key, expected_revision, current.revision)
        return current

    def update(self, key: str, body: dict[str, Any], expected_revision: int) -> Document:
        current = self._check_revision(key, expected_revision)
        document = Document(key, current.revision + 1, copy.deepcopy(body))
        self._docs[key] = document
        self._publish(key, document)
        return document

    def patch(self, key: str, changes: dict[str, Any], expected_revision: int) -> Document:
        body = {**self.get(key).body, **changes}
        return self.update(key, body, expected_revision)

    def delete(self, key: str, expected_revision: int) -> None:
        self._check_revision(key, expected_revision)
        del self._docs[key]
        self._publish(key, None)
