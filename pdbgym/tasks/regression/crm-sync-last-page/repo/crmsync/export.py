"""The CRM's export endpoint, as a paged view over an export snapshot (JSON lines)."""

from __future__ import annotations

import json


class ExportSnapshot:
    """A point-in-time export: ``count()`` records, served ``limit`` at a time from ``offset``."""

    MAX_LIMIT = 50

    def __init__(self, jsonl: str) -> None:
        self._records = [json.loads(line) for line in jsonl.splitlines() if line.strip()]

    def count(self) -> int:
        return len(self._records)

    def page(self, offset: int, limit: int) -> list[dict]:
        """Records [offset, offset + limit); the export refuses pages over MAX_LIMIT."""
        if not 0 < limit <= self.MAX_LIMIT:
            raise ValueError(f"limit must be 1..{self.MAX_LIMIT}, got {limit}")
        return self._records[offset:offset + limit]
