"""Atomic file writes: a reader sees the old file or the new one, never a half-written one; JSONL logs
grow by whole lines."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def _read_umask() -> int:
    # Read once at import: os.umask can only be read by setting it, which races with other threads.
    current = os.umask(0o022)
    os.umask(current)
    return current


_UMASK = _read_umask()


@contextmanager
def atomic_target(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is flushed to disk and renamed onto ``path``.

    The temporary file lives in the same folder so the final ``os.replace`` is a same-filesystem
    rename, which POSIX makes atomic. On an exception the temporary file is removed and ``path`` is
    left untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    tmp_path = Path(tmp_name)
    # mkstemp makes the file 0600: keep the mode of the file being replaced, or the usual default.
    os.chmod(tmp_path, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_UMASK)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as written:
            os.fsync(written.fileno())
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_target(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def json_safe(data: Any) -> Any:
    """``data`` with every NaN or infinite float replaced by None: JSON has no such numbers, and a figure that
    does not exist (an SE of one task) is ``null`` to every JSON reader, where a bare ``NaN`` breaks strict ones."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: json_safe(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(value) for value in data]
    return data


def write_json_atomic(path: Path, data: Any, *, indent: int = 1, sort_keys: bool = False) -> None:
    """Write ``data`` as JSON to ``path`` atomically."""
    write_text_atomic(path, json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n")


def append_jsonl(path: Path, rows: list[Any], *, sort_keys: bool = False) -> None:
    """Append ``rows`` to the JSONL log ``path`` in one write of whole lines, flushed to disk: a crash leaves
    whole lines, or a cut last line that readers of these logs skip."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write("".join(json.dumps(row, sort_keys=sort_keys) + "\n" for row in rows))
        handle.flush()
        os.fsync(handle.fileno())
