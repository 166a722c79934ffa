"""The grading tree: a fresh copy of the task's pristine repo with the agent's source change applied.

The change is read once from the workspace (``read_agent_change``): the text of each source file the
agent changed (a task file that is UTF-8 text) or added (a new ``.py`` file), and the task files it
removed. Bytecode, hidden files, binaries, links the agent made and names with control characters never
reach the tree, whatever they hold; each change not taken is listed with the reason.

Everything is read without following a symlink on the host: folders are walked with ``os.fwalk``
(directory fds, links never descended), files are opened relative to their folder's fd with
``O_NOFOLLOW`` and checked to be regular files, and links are recreated as links, then kept only if
they resolve inside the tree. So an agent-made link to a host file never brings that file's content into
the grading run, and a link to ``/etc`` copies nothing. What was not taken is listed with the reason.
"""

from __future__ import annotations

import difflib
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.grading.protect import ignore_reason, new_module_reason
from pdbgym.sandbox import beneath
from pdbgym.sandbox.environment import SANDBOX_HOME_DIR

# A workspace's files are bounded one by one by the sandbox's RLIMIT_FSIZE; this bounds their sum, so
# a workspace filled with many files cannot make grading read without end.
MAX_TAKEN_BYTES = 256 * 1024**2


@dataclass
class TreePlan:
    """What grading took from the agent. ``ignored`` maps a repo-relative path to why it was not taken."""

    changed: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)


def _skipped_silently(rel: str) -> bool:
    """Files that are not the agent's work: pdbgym's own run files, the sandbox HOME, bytecode caches."""
    parts = rel.split("/")
    return parts[0] == SANDBOX_HOME_DIR or parts[-1].startswith(".pdbgym-") or "__pycache__" in parts


def _entries(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry under ``root`` as ``rel -> (kind, link target)``; kinds are file, dir, link, other.
    Read with lstat only; nothing is opened or followed."""
    found: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        base = os.path.relpath(dirpath, root)
        for name in [*dirnames, *filenames]:
            rel = name if base == "." else f"{base}/{name}"
            if _skipped_silently(rel):
                continue
            try:
                mode = os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode
                target = os.readlink(name, dir_fd=dirfd) if stat.S_ISLNK(mode) else ""
            except OSError:
                continue  # vanished while walking
            kind = ("dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode)
                    else "link" if stat.S_ISLNK(mode) else "other")
            found[rel] = (kind, target)
        dirnames[:] = [d for d in dirnames if not _skipped_silently(d if base == "." else f"{base}/{d}")
                       and found.get(d if base == "." else f"{base}/{d}", ("",))[0] == "dir"]
    return found


def _read_file(root: Path, rel: str, budget: int) -> bytes:
    """The bytes of regular file ``root/rel``, opened component by component without following links."""
    return beneath.read_bytes(root, rel, budget, follow_links=False)[0]


def read_tree_file(root: Path, rel: str, limit: int = 16 * 1024**2) -> str | None:
    """The text of regular file ``root/rel`` read without following links (None: not a regular file,
    missing, a link on the way, or over ``limit`` bytes)."""
    try:
        return _read_file(root, rel, limit).decode("utf-8", errors="replace")
    except OSError:
        return None


def _parent_ok(tree: Path, rel: str) -> bool:
    """Create ``rel``'s folders in the tree; False when one of them exists as a file or a link."""
    current = tree
    for part in rel.split("/")[:-1]:
        current = current / part
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            return False
        current.mkdir(exist_ok=True)
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def copy_pristine(repo: Path, tree: Path, plan: TreePlan) -> dict[str, tuple[str, str]]:
    """Copy the task's repo into ``tree`` without following links; return its entries."""
    tree.mkdir(parents=True)
    entries = _entries(repo)
    for rel, (kind, target) in sorted(entries.items()):
        if not _parent_ok(tree, rel):
            continue
        if kind == "dir":
            (tree / rel).mkdir(exist_ok=True)
        elif kind == "file":
            (tree / rel).write_bytes(_read_file(repo, rel, 1 << 40))
        elif kind == "link":
            os.symlink(target, tree / rel)
        else:
            plan.ignored[rel] = "not a regular file, folder or link in the task's repo: not copied"
    return entries


@dataclass
class SourceChange:
    """The agent's change as grading takes it, read once from the workspace: the new text of each source
    file it changed or added (``texts``, repo-relative), the task files it deleted, and what was not
    taken with the reason. Nothing else of the workspace reaches grading: no bytecode, no hidden or
    binary file, no link, no new file that is not a ``.py`` source, no name with a control character."""

    texts: dict[str, str] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    ignored: dict[str, str] = field(default_factory=dict)

    def unified_diff(self, task_repo: Path, limit: int = 256 * 1024) -> str:
        """The change as a unified diff against the task's repo (cut at ``limit`` characters)."""
        parts: list[str] = []
        for rel in sorted({*self.texts, *self.deleted}):
            before = read_tree_file(task_repo, rel) or ""
            after = self.texts.get(rel, "")
            parts += difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                          f"a/{rel}", "/dev/null" if rel in self.deleted else f"b/{rel}")
        text = "".join(line if line.endswith("\n") else line + "\n" for line in parts)
        return text if len(text) <= limit else text[:limit] + f"\n[... diff cut at {limit} characters ...]\n"


def _source_text(data: bytes) -> str | None:
    """``data`` as source text: UTF-8 without NUL bytes; None for anything binary."""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_agent_change(task_repo: Path, workspace: Path) -> SourceChange:
    """The agent's change: every regular file of ``workspace`` whose bytes differ from the task's version
    (a task file that is text, or a new ``.py`` file) and that grading's rules allow (``ignore_reason``,
    ``new_module_reason``), read without following links; and every task file the agent removed."""
    change = SourceChange()
    pristine = _entries(task_repo)
    current = _entries(workspace)

    def is_package(folder: str) -> bool:
        init = f"{folder}/__init__.py" if folder else "__init__.py"
        return init in pristine or current.get(init, ("",))[0] == "file"

    budget = MAX_TAKEN_BYTES
    for rel, (kind, target) in sorted(current.items()):
        before = pristine.get(rel)
        if kind == "dir" or (before is not None and before == (kind, target) and kind == "link"):
            continue
        reason = ignore_reason(rel, is_package) or new_module_reason(rel, pristine)
        if reason is None and kind != "file":
            reason = "a link or special file: grading takes source text only"
        if reason is None and before is not None and before[0] != "file":
            reason = "replaces a folder or link of the task's repo: not taken"
        if reason is None and before is None and not rel.endswith(".py"):
            reason = "a new file that is not Python source (.py): not taken"
        text = None
        if reason is None:
            try:
                data = _read_file(workspace, rel, budget)
            except OSError as exc:
                data, reason = b"", f"could not be read safely ({exc}): not taken"
            if before is not None and reason is None and data == _read_file(task_repo, rel, 1 << 40):
                continue
            if reason is None and (text := _source_text(data)) is None:
                reason = "binary (not UTF-8 text): grading takes source text only"
        if reason is not None:
            if kind == "file" and before is not None and before[0] == "file" and _same_file(task_repo, workspace, rel):
                continue  # unchanged: nothing to say
            change.ignored[rel] = reason
            continue
        assert text is not None
        budget -= len(data)
        change.texts[rel] = text
    for rel, (kind, _) in sorted(pristine.items()):
        if kind == "dir" or rel in current:
            continue
        reason = ignore_reason(rel, is_package)
        if reason is not None:
            change.ignored[rel] = f"deleted by the agent, kept: {reason}"
        else:
            change.deleted.append(rel)
    return change


def _same_file(task_repo: Path, workspace: Path, rel: str) -> bool:
    try:
        return _read_file(workspace, rel, 1 << 40) == _read_file(task_repo, rel, 1 << 40)
    except OSError:
        return False


def build_tree(task_repo: Path, change: SourceChange, tree: Path) -> TreePlan:
    """A fresh copy of the task's repo at ``tree`` with ``change`` applied; what was taken and not."""
    plan = TreePlan(ignored=dict(change.ignored))
    copy_pristine(task_repo, tree, plan)
    for rel, text in sorted(change.texts.items()):
        if not _parent_ok(tree, rel):
            plan.ignored[rel] = "its folder is a file or a link in the grading tree: not taken"
            continue
        destination = tree / rel
        _remove(destination)
        destination.write_bytes(text.encode("utf-8"))
        plan.changed.append(rel)
    for rel in change.deleted:
        _remove(tree / rel)
        plan.deleted.append(rel)
    _drop_escaping_links(tree, plan)
    return plan


def _drop_escaping_links(tree: Path, plan: TreePlan) -> None:
    """Remove every link of the tree that resolves outside it (on the host), until none does."""
    root = tree.resolve()
    changed = True
    while changed:
        changed = False
        for dirpath, dirnames, filenames, _ in os.fwalk(tree, follow_symlinks=False):
            for name in [*dirnames, *filenames]:
                path = Path(dirpath) / name
                if not path.is_symlink():
                    continue
                resolved = Path(os.path.realpath(path))
                if resolved == root or resolved.is_relative_to(root):
                    continue
                rel = str(path.relative_to(tree))
                plan.ignored[rel] = (f"symlink to '{os.readlink(path)}' leads outside the project: "
                                     "not taken, only links inside the project are kept")
                path.unlink()
                if rel in plan.changed:
                    plan.changed.remove(rel)
                changed = True
