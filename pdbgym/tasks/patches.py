"""Unified diffs: parse a task's reference patch into hunks, check that it stays inside its repo, and apply
it to a folder with git (no repository discovery, no ``--unsafe-paths``, result verified)."""

from __future__ import annotations

import codecs
import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pdbgym.errors import TaskFormatError
from pdbgym.grading.protect import is_protected_path

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


# ---------------------------------------------------------------------------------------------------
# Safety: a patch is untrusted text. Before it touches a folder every path it names is checked, and it
# is applied by git with repository discovery off, without ``--unsafe-paths``, and the result verified.

class UnsafePatchError(TaskFormatError):
    """A patch that would write outside its folder or through a link: never applied."""


class PatchEditsTestsError(TaskFormatError):
    """A task's reference patch that changes test files (grading would never take such a fix)."""


_PATH_HEADERS = ("rename from ", "rename to ", "copy from ", "copy to ")
_LINK_MODES = ("120000", "160000")  # a symlink, a submodule (gitlink)
_MODE_HEADERS = ("new file mode ", "new mode ", "old mode ", "deleted file mode ")


def _unquote(raw: str) -> str:
    """git's C-style quoting of unusual names (``"a/f\\303\\266o"``) undone."""
    if len(raw) >= 2 and raw.startswith('"') and raw.endswith('"'):
        return codecs.escape_decode(raw[1:-1].encode("utf-8"))[0].decode("utf-8", "surrogateescape")
    return raw


def _header_paths(patch: str) -> tuple[list[str], list[str]]:
    """Every path the patch's headers name (``diff --git``, ``---``/``+++``, rename/copy lines), with the
    ``a/``/``b/`` prefix removed, and the problems already visible in the text itself."""
    paths: list[str] = []
    problems: list[str] = []
    for line in patch.splitlines():
        if line.startswith(("--- ", "+++ ")):
            raw = _unquote(line[4:].split("\t", 1)[0].strip())
            if raw == "/dev/null":
                continue
            if not raw.startswith(("a/", "b/")):
                problems.append(f"{raw!r}: a header path must start with a/ or b/ (or be /dev/null)")
                continue
            paths.append(raw[2:])
        elif line.startswith("diff --git "):
            # Names with spaces make this line ambiguous; every word is checked, which errs on refusing.
            paths.extend(_unquote(word)[2:] if _unquote(word).startswith(("a/", "b/")) else _unquote(word)
                         for word in line[len("diff --git "):].split())
        elif line.startswith(_PATH_HEADERS):
            paths.append(_unquote(line.split(" ", 2)[2].strip()))
        elif line.startswith(_MODE_HEADERS) and line.split()[-1] in _LINK_MODES:
            problems.append(f"the patch creates or changes a symlink or submodule ({line.strip()!r}); "
                            "a patch may only change regular files")
    return paths, problems


def _path_problem(rel: str, root: Path | None) -> str | None:
    """Why ``rel`` may not be patched inside ``root``, or None. A link anywhere on the way is refused:
    git would follow it, and the write would land wherever it points."""
    parts = PurePosixPath(rel).parts
    if not rel or rel.startswith("/") or "\\" in rel:
        return f"{rel!r} is not a relative path inside the repo"
    if ".." in parts or ".git" in parts:
        return f"{rel!r} has a '..' or '.git' component and could leave the repo"
    if root is not None:
        for depth in range(1, len(parts) + 1):
            on_the_way = Path(root, *parts[:depth])
            if on_the_way.is_symlink():
                return f"{rel!r} goes through the symlink {PurePosixPath(*parts[:depth])} in the repo"
    return None


def check_patch(patch: str, root: Path | None = None, *, reference: bool = False) -> list[str]:
    """The repo-relative files ``patch`` touches, once each is shown safe; else an error naming every
    offending path.

    :class:`UnsafePatchError`: absolute paths, ``..`` or ``.git`` components, paths through a symlink
    that exists in ``root`` (when given), symlink or submodule modes. Then, for a task's ``reference``
    patch, :class:`PatchEditsTestsError` when it edits a test file (``is_protected_path``, the rule grading uses).
    """
    if not patch.strip():
        raise TaskFormatError("the patch is empty")
    paths, problems = _header_paths(patch)
    if not paths and not problems:
        raise TaskFormatError("patch holds no file headers ('--- a/...', '+++ b/...')")
    unique = sorted(set(paths))
    problems += [p for p in (_path_problem(rel, root) for rel in unique) if p]
    if problems:
        raise UnsafePatchError("unsafe patch, not applied: " + "; ".join(problems))
    tests = [rel for rel in unique if is_protected_path(rel)] if reference else []
    if tests:
        raise PatchEditsTestsError(f"the reference patch edits test files {tests}; a fix must change code only")
    return unique


def _git_env(folder: Path) -> dict[str, str]:
    """git with no repository around it: any enclosing repository (even one whose .gitignore names
    ``folder``) would make ``git apply`` resolve paths from its root and skip them, exiting 0."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    # A GIT_DIR that cannot exist (not a folder name inside the tree, where a crafted repository with a
    # core.worktree elsewhere could be planted) turns discovery off; the ceiling is a second fence.
    env.update(GIT_DIR="/dev/null/no-repository", GIT_CEILING_DIRECTORIES=str(folder.parent),
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return env


def _git_apply(folder: Path, patch: str, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["git", "apply", "-p1", "--whitespace=nowarn", *extra, "-"]
    return subprocess.run(args, cwd=folder, input=patch, text=True, capture_output=True, timeout=60,
                          env=_git_env(folder))


def _git_paths(folder: Path, patch: str) -> list[str]:
    """The paths git itself reads from the patch (its parser, not ours, decides what it writes)."""
    listed = _git_apply(folder, patch, "--numstat", "-z")
    if listed.returncode != 0:
        raise TaskFormatError(f"patch does not apply to {folder}: {listed.stderr.strip()}")
    fields = listed.stdout.split("\0")
    paths, index = [], 0
    while index < len(fields):
        head = fields[index].split("\t")
        if len(head) == 3 and head[2]:
            paths.append(head[2])
        elif len(head) == 3:  # a rename or copy: the two names follow
            paths.extend(fields[index + 1:index + 3])
            index += 2
        index += 1
    return paths


def _snapshot(folder: Path, paths: Iterable[str]) -> dict[str, bytes | None]:
    return {rel: (folder / rel).read_bytes() if (folder / rel).is_file() else None for rel in paths}


def apply_patch(folder: Path, patch: str, *, reverse: bool = False) -> None:
    """Apply a unified diff to ``folder`` (``git apply -p1``, which needs no repository), safely.

    The patch is checked first (:func:`check_patch`, against the links in ``folder``, and again on the
    paths git's own parser reads from it); git runs without ``--unsafe-paths`` and without repository
    discovery; afterwards every file the patch names must have changed and the patch must now reverse
    cleanly, so a patch git silently skipped is an error, never a pass.
    """
    folder = Path(folder).resolve()
    named = check_patch(patch, folder)
    named += [rel for rel in _git_paths(folder, patch) if rel not in named]
    problems = [p for p in (_path_problem(rel, folder) for rel in named) if p]
    if problems:
        raise UnsafePatchError("unsafe patch, not applied: " + "; ".join(problems))
    before = _snapshot(folder, named)
    direction = ["--reverse"] if reverse else []
    proc = _git_apply(folder, patch, *direction)
    if proc.returncode != 0:
        raise TaskFormatError(f"patch does not apply to {folder}: {proc.stderr.strip()}")
    after = _snapshot(folder, named)
    unchanged = [rel for rel in named if before[rel] == after[rel] and _has_hunks(patch, rel)]
    undone = _git_apply(folder, patch, "--check", *([] if reverse else ["--reverse"]))
    if unchanged or undone.returncode != 0:
        raise TaskFormatError(
            f"git apply exited 0 but the patch is not in {folder}: unchanged {unchanged}, reverse check said "
            f"{undone.stderr.strip()!r}; the folder may sit where git resolves paths elsewhere")


def _has_hunks(patch: str, rel: str) -> bool:
    try:
        return any(h.path == rel for h in parse_patch(patch))
    except TaskFormatError:
        return False
