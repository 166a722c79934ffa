"""One SFT training example: token ids with the mask of the ids the loss is taken on."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TypedDict


class ExampleRow(TypedDict):
    """One line of a corpus' ``examples.jsonl``: an ``Example``'s fields and its content hash."""

    instance_id: str
    dataset: str
    sample_idx: int
    source: str
    solved: bool
    input_ids: list[int]
    assistant_masks: list[int]
    truncated: bool
    termination_reason: str | None
    content_hash: str


@dataclass
class Example:
    """One training example; ``assistant_masks[i] == 1`` marks an id the loss is taken on."""

    instance_id: str
    dataset: str
    sample_idx: int
    source: str
    solved: bool
    input_ids: list[int]
    assistant_masks: list[int]
    truncated: bool = False
    termination_reason: str | None = None

    @property
    def content_hash(self) -> str:
        """sha256 (hex) of the ids and mask: equal hashes are the same training signal."""
        digest = hashlib.sha256()
        digest.update(json.dumps([self.input_ids, self.assistant_masks], separators=(",", ":")).encode())
        return digest.hexdigest()

    @property
    def loss_tokens(self) -> int:
        return sum(self.assistant_masks)

    def to_json(self) -> ExampleRow:
        return {"instance_id": self.instance_id, "dataset": self.dataset, "sample_idx": self.sample_idx,
                "source": self.source, "solved": self.solved, "input_ids": list(self.input_ids),
                "assistant_masks": list(self.assistant_masks), "truncated": self.truncated,
                "termination_reason": self.termination_reason, "content_hash": self.content_hash}
