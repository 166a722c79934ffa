"""JSON reads with clear errors for the adapter package (atomic writes: ``pdbgym.fileio``; adapter JSON is
written ``indent=2, sort_keys=True`` because people diff it)."""

from __future__ import annotations

import json
from pathlib import Path

from pdbgym.adapters.errors import CorruptArtifactError
from pdbgym.fileio import JSONValue


def read_json(path: Path, what: str) -> JSONValue:
    """Read a JSON file; a missing or malformed file raises an error naming ``what`` it should be."""
    path = Path(path)
    if not path.is_file():
        raise CorruptArtifactError(f"{path}: {what} not found.")
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptArtifactError(f"{path}: {what} is not valid JSON ({exc}); fix or re-save it.") from exc
