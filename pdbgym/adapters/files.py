"""Small file helpers shared by the adapter package: atomic JSON writes and JSON reads with clear errors."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pdbgym.adapters.errors import CorruptArtifactError


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write ``payload`` as indented JSON via a temporary file and rename, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(payload, handle, indent=2, sort_keys=True)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


def read_json(path: Path, what: str) -> Any:
    """Read a JSON file; a missing or malformed file raises an error naming ``what`` it should be."""
    path = Path(path)
    if not path.is_file():
        raise CorruptArtifactError(f"{path}: {what} not found.")
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptArtifactError(f"{path}: {what} is not valid JSON ({exc}); fix or re-save it.") from exc
