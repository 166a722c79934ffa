"""The grading tree: the task's pristine repo plus only the agent's changes that grading allows.

Everything is read without following a symlink on the host: folders are walked with ``os.fwalk``
(directory fds, links never descended), files are opened relative to their folder's fd with
``O_NOFOLLOW`` and checked to be regular files, and links are recreated as links, then kept only if
they resolve inside the tree. So an agent-made link to a host file never brings that file's content into
the grading run, and a link to ``/etc`` copies nothing. What was not taken is listed with the reason.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pdbgym.sandbox import beneath
from pdbgym.sandbox.environment import SANDBOX_HOME_DIR
from pdbgym.tasks.protect import ignore_reason, new_module_reason

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


def overlay_agent_changes(task_repo: Path, workspace: Path, tree: Path) -> TreePlan:
    """Build ``tree`` from ``task_repo`` and the allowed changes of ``workspace``; say what was taken."""
    plan = TreePlan()
    pristine = copy_pristine(task_repo, tree, plan)
    current = _entries(workspace)

    def is_package(folder: str) -> bool:
        init = f"{folder}/__init__.py" if folder else "__init__.py"
        return init in pristine or current.get(init, ("",))[0] == "file"

    budget = MAX_TAKEN_BYTES
    for rel, (kind, target) in sorted(current.items()):
        before = pristine.get(rel)
        if kind == "dir":
            continue
        if before is not None and before == (kind, target) and kind == "link":
            continue
        if kind == "file" and before is not None and before[0] == "file":
            try:
                if _read_file(workspace, rel, min(budget, (tree / rel).stat().st_size)) == \
                        _read_file(tree, rel, 1 << 40):
                    continue
            except OSError:
                pass  # differs in size (over the limit read) or unreadable: judged below
        reason = ignore_reason(rel, is_package) or new_module_reason(rel, pristine)
        if reason is None and kind == "other":
            reason = "not a regular file, folder or link: not taken"
        if reason is None and before is not None and before[0] == "dir":
            reason = "replaces a folder of the original repo: not taken"
        if reason is None and not _parent_ok(tree, rel):
            reason = "its folder is a file or a link in the grading tree: not taken"
        if reason is None:
            reason = _take(workspace, tree, rel, kind, target, budget)
        if reason is not None:
            plan.ignored[rel] = reason
            continue
        if kind == "file":
            budget -= (tree / rel).stat().st_size
        plan.changed.append(rel)
    for rel, (kind, _) in sorted(pristine.items()):
        if kind == "dir" or rel in current:
            continue
        reason = ignore_reason(rel, is_package)
        if reason is not None:
            plan.ignored[rel] = f"deleted by the agent, kept: {reason}"
        else:
            _remove(tree / rel)
            plan.deleted.append(rel)
    _drop_escaping_links(tree, plan)
    return plan


def _take(workspace: Path, tree: Path, rel: str, kind: str, target: str, budget: int) -> str | None:
    """Put the workspace's ``rel`` into the tree; a reason when it cannot be taken."""
    destination = tree / rel
    if kind == "link":
        _remove(destination)
        os.symlink(target, destination)
        return None
    try:
        data = _read_file(workspace, rel, budget)
    except OSError as exc:
        return f"could not be read safely ({exc}): not taken"
    _remove(destination)
    destination.write_bytes(data)
    return None


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
