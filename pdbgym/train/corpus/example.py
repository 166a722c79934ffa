"""One SFT training example (token ids with the mask of the ids the loss is taken on), and the one reader and
writer of a corpus' ``examples.jsonl``.

A line of ``examples.jsonl`` is an ``Example``'s fields in declaration order, then its ``content_hash``
(``json.dumps`` with its default separators). The hash on a line is written for people and other tools; a
reader recomputes it from the ids and mask (the corpus' manifest hash covers every line).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from pdbgym.fileio import JsonlError, JSONValue, read_jsonl, write_text_atomic


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

    def to_json(self) -> dict[str, JSONValue]:
        """The example as one line of ``examples.jsonl`` holds it: its fields in order, then ``content_hash``."""
        row: dict[str, JSONValue] = {spec.name: getattr(self, spec.name) for spec in fields(self)}
        row["input_ids"], row["assistant_masks"] = list(self.input_ids), list(self.assistant_masks)
        row["content_hash"] = self.content_hash
        return row

    @classmethod
    def from_json(cls, row: Mapping[str, JSONValue], where: str = "an example") -> Example:
        """The example a line of ``examples.jsonl`` holds; a missing field is a ``JsonlError`` naming ``where``."""
        required = [spec.name for spec in fields(cls) if spec.name not in _OPTIONAL]
        missing = [name for name in required if name not in row]
        if missing:
            raise JsonlError(where, f"an example needs {', '.join(missing)}: rebuild the corpus (pdbgym train corpus)")
        values: dict[str, object] = {spec.name: row[spec.name] for spec in fields(cls) if spec.name in row}
        return cls(**values)  # type: ignore[arg-type]  # JSON values; the corpus hash checks the ids and mask


_OPTIONAL = {"truncated", "termination_reason"}  # fields with a default: a line written without them still reads


def examples_text(examples: Iterable[Example]) -> str:
    """The text of an ``examples.jsonl`` holding ``examples`` in order, one line each."""
    return "".join(json.dumps(example.to_json()) + "\n" for example in examples)


def write_examples(path: Path, examples: Iterable[Example]) -> None:
    """Write ``examples`` to ``path`` (atomically), one line each, in order."""
    write_text_atomic(path, examples_text(examples))


def read_examples(path: Path) -> list[Example]:
    """The examples of an ``examples.jsonl``, in file order; a line that is not a whole example is a
    ``JsonlError`` naming the file and line."""
    found = read_jsonl(path, strict=True)
    return [Example.from_json(row, f"{path}:{number}") for row, number in zip(found.rows, found.numbers, strict=True)]
