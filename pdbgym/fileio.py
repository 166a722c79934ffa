"""Atomic file writes: a reader sees the old file or the new one, never a half-written one; JSONL logs
grow by whole lines, and one reader reads them back."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, TypeAlias

from pdbgym.errors import PdbgymError

# A value as ``json.loads`` returns it, for data whose shape is truly open (a user's file, a library's
# settings); a record whose fields are known is a dataclass or a TypedDict instead.
JSONValue: TypeAlias = "str | int | float | bool | None | list[JSONValue] | dict[str, JSONValue]"


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


def json_safe(data: object) -> object:
    """``data`` with every NaN or infinite float replaced by None: JSON has no such numbers, and a figure that
    does not exist (an SE of one task) is ``null`` to every JSON reader, where a bare ``NaN`` breaks strict ones."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: json_safe(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(value) for value in data]
    return data


def write_json_atomic(path: Path, data: object, *, indent: int = 1, sort_keys: bool = False) -> None:
    """Write ``data`` (anything ``json.dumps`` takes: a record's TypedDict, a list of them) as JSON to ``path``
    atomically."""
    write_text_atomic(path, json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n")


def append_jsonl(path: Path, rows: Iterable[object], *, sort_keys: bool = False) -> None:
    """Append ``rows`` to the JSONL log ``path`` in one write of whole lines, flushed to disk: a crash leaves
    whole lines, or a cut last line that ``read_jsonl`` skips."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        # After a cut last line the first new row starts a line of its own, so only the cut one is lost.
        text = ("\n" if _ends_mid_line(handle) else "") + "".join(json.dumps(row, sort_keys=sort_keys) + "\n"
                                                                 for row in rows)
        handle.write(text.encode())
        handle.flush()
        os.fsync(handle.fileno())


def _ends_mid_line(handle: BinaryIO) -> bool:
    """Whether the binary file ``handle`` has bytes after its last newline (appends still go to the end)."""
    end = handle.seek(0, os.SEEK_END)
    if end == 0:
        return False
    handle.seek(end - 1)
    return handle.read(1) != b"\n"


class JsonlError(PdbgymError):
    """A line of a JSONL file that must be whole is not a JSON object: ``where`` (``path:line``) and why."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where, self.reason = where, reason


@dataclass
class JsonlRows:
    """What a JSONL file holds: ``rows``, each line's JSON object in file order; ``numbers``, each row's line
    number (from 1, for messages); ``torn``, lines that were not a JSON object and were skipped."""

    rows: list[dict[str, JSONValue]] = field(default_factory=list)
    numbers: list[int] = field(default_factory=list)
    torn: int = 0


def read_jsonl(path: Path, *, strict: bool = False) -> JsonlRows:
    """The one JSONL reader: every line's JSON object, blank lines skipped; a missing file holds none.

    A line that is not a JSON object is counted in ``torn`` and skipped: a kill can cut the last line of
    an ``append_jsonl``, and the next append starts a fresh line, so a cut line can sit anywhere in a log.
    ``strict``: such a line is a ``JsonlError`` naming the file and line instead (a file a person wrote,
    or one whose content is hashed)."""
    path = Path(path)
    found = JsonlRows()
    if not path.is_file():
        return found
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if strict:
                raise JsonlError(f"{path}:{number}", f"not JSON ({exc})") from exc
            found.torn += 1
            continue
        if not isinstance(row, dict):
            if strict:
                raise JsonlError(f"{path}:{number}", f"a line must hold a JSON object, not {type(row).__name__}")
            found.torn += 1
            continue
        found.rows.append(row)
        found.numbers.append(number)
    return found
