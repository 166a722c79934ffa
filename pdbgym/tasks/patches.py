"""Unified diffs: parse a task's reference patch into hunks, and apply a patch to a folder with git."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.errors import TaskFormatError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class Hunk:
    """One hunk: ``old_lines`` (``old_count`` lines from ``old_start``, 1-based) become ``new_lines``."""

    path: str
    old_start: int
    old_lines: list[str] = field(default_factory=list)
    new_lines: list[str] = field(default_factory=list)

    @property
    def old_count(self) -> int:
        return len(self.old_lines)

    def changed_span(self) -> tuple[int, int, list[str]]:
        """The smallest replaced line range ``(first, last, replacement)``: context trimmed off both ends.

        ``last < first`` means a pure insertion before line ``first``.
        """
        old, new = list(self.old_lines), list(self.new_lines)
        head = 0
        while head < min(len(old), len(new)) and old[head] == new[head]:
            head += 1
        tail = 0
        while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
            tail += 1
        first = self.old_start + head
        last = self.old_start + len(old) - tail - 1
        return first, last, new[head : len(new) - tail]


def _strip_prefix(raw: str) -> str:
    path = raw.split("\t", 1)[0].strip()
    return path[2:] if path.startswith(("a/", "b/")) else path


def parse_patch(patch: str) -> list[Hunk]:
    """Hunks of a unified diff, in order. Paths are repo-relative (a/ b/ prefixes removed)."""
    hunks: list[Hunk] = []
    current_path: str | None = None
    hunk: Hunk | None = None
    for line in patch.splitlines():
        if line.startswith("--- "):
            hunk = None
            continue
        if line.startswith("+++ "):
            current_path = _strip_prefix(line[4:])
            hunk = None
            continue
        match = _HUNK.match(line)
        if match:
            if current_path is None:
                raise TaskFormatError("patch has a hunk before any '+++ path' header")
            hunk = Hunk(path=current_path, old_start=int(match.group(1)))
            hunks.append(hunk)
            continue
        if hunk is None or line.startswith("\\"):
            continue
        if line.startswith("-"):
            hunk.old_lines.append(line[1:])
        elif line.startswith("+"):
            hunk.new_lines.append(line[1:])
        elif line.startswith(" ") or line == "":
            hunk.old_lines.append(line[1:])
            hunk.new_lines.append(line[1:])
    if not hunks:
        raise TaskFormatError("patch holds no hunks")
    return hunks


def patched_files(patch: str) -> list[str]:
    return sorted({h.path for h in parse_patch(patch)})


def apply_patch(folder: Path, patch: str, *, reverse: bool = False) -> None:
    """Apply a unified diff to ``folder`` (with ``git apply``, which needs no repository)."""
    args = ["git", "apply", "-p1", "--whitespace=nowarn", "--unsafe-paths"]
    if reverse:
        args.append("--reverse")
    # A git repository above ``folder`` would make git resolve paths from its root: fence it off.
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(Path(folder).resolve().parent)}
    proc = subprocess.run(args, cwd=folder, input=patch, text=True, capture_output=True, timeout=60, env=env)
    if proc.returncode != 0:
        raise TaskFormatError(f"patch does not apply to {folder}: {proc.stderr.strip()}")
