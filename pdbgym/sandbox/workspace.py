"""Each episode works on its own copy of the task's repo.

A workspace folder's name carries its owner (``pdbgym-ws-<pid>.<start>-<random>``: the creating
process's id and its start time in clock ticks since boot), so a later run can tell the copies of a
process that died without cleaning up (SIGKILL, OOM) from live ones and remove them
(:func:`reap_stale_workspaces`).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from pdbgym.errors import SandboxError

# Caches from a previous run would leak state between episodes and slow the copy.
_NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache", ".ruff_cache")
_PREFIX = "pdbgym-ws-"
_OWNED = re.compile(rf"^{_PREFIX}(\d+)\.(\d+)-")


def process_start(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot, from ``/proc``), or None when no such process runs.

    Together with the pid this names one process: a pid reused by a later process has another start.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields are counted after its last ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


def _owner_tag() -> str:
    pid = os.getpid()
    return f"{pid}.{process_start(pid) or 0}"


def escaping_links(root: Path) -> list[str]:
    """Symlinks under ``root`` that point outside it, as ``"rel/path -> target"`` (sorted).

    Absolute targets always count as outside (in a copy they would point back at the original or the
    host), and so does a relative one whose path, read plainly or resolved through other links, leaves
    ``root``.
    """
    root = Path(root)
    real_root = root.resolve()
    found = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            if not path.is_symlink():
                continue
            target = os.readlink(path)
            plain = os.path.normpath(os.path.join(os.path.dirname(path.relative_to(root)), target))
            resolved = Path(os.path.realpath(path))
            if (os.path.isabs(target) or plain == ".." or plain.startswith("../")
                    or not resolved.is_relative_to(real_root)):
                found.append(f"{path.relative_to(root).as_posix()} -> {target}")
    return sorted(found)


def owned_folder(label: str, parent: Path | None = None) -> Path:
    """A new empty folder named after this process like a workspace (``pdbgym-ws-<pid>.<start>-<label>...``),
    so ``reap_stale_workspaces`` removes it once this process is gone."""
    if parent is not None:
        Path(parent).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{_owner_tag()}-{label}", dir=parent)).resolve()


class Workspace:
    """A private, writable copy of a project. ``path`` is its root; use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, source_repo: Path, parent: Path | None = None, *, in_owned: bool = False) -> Workspace:
        """Copy ``source_repo`` into a fresh folder under ``parent`` (default: the system temp dir).

        ``in_owned``: ``parent`` is a folder of its own that ``owned_folder`` made (a fork server's, emptied
        after each episode and removed with its owner), so the copy is ``parent/w``: its path is then as
        long as a workspace's plus two characters. The path shows in every breakpoint, listing and
        traceback an agent reads; nested with a second owner tag it took twice the characters.

        Symlinks are copied as links, never followed; a link that points outside the repo is refused,
        because tools on the host that read or write workspace files would follow it out.
        """
        source_repo = Path(source_repo)
        if not source_repo.is_dir():
            raise SandboxError(
                f"cannot create a workspace: {source_repo} is not a folder; pass the task's repo folder"
            )
        escaping = escaping_links(source_repo)
        if escaping:
            raise SandboxError(
                f"cannot create a workspace: {source_repo} holds symlinks that point outside it: "
                f"{', '.join(escaping[:5])}; replace them with the files or with links inside the repo"
            )
        if in_owned:
            if parent is None:
                raise ValueError("in_owned needs the owned parent folder")
            root = Path(parent).resolve() / "w"
            try:
                root.mkdir()
            except OSError as exc:
                raise SandboxError(f"cannot create a workspace in {parent}: {exc}; the folder must be empty "
                                   "(the last episode's copy is removed when it ends)") from exc
        else:
            root = owned_folder("", parent)
        try:
            shutil.copytree(source_repo, root, symlinks=True, ignore=_NOT_COPIED, dirs_exist_ok=True)
        except (OSError, shutil.Error) as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise SandboxError(f"cannot copy {source_repo} into a workspace: {exc}") from exc
        return cls(root)

    def cleanup(self) -> None:
        """Delete the copy. Safe to call twice."""
        shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        return f"Workspace({str(self.path)!r})"


def reap_stale_workspaces(parent: Path | str | None = None) -> list[Path]:
    """Remove the workspaces under ``parent`` (default: the system temp dir) whose creating process is
    gone, and return them. Folders without an owner in their name, and live owners' ones, are kept."""
    folder = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    removed = []
    try:
        candidates = sorted(folder.glob(f"{_PREFIX}*"))
    except OSError:
        return removed
    for path in candidates:
        owner = _OWNED.match(path.name)
        if owner is None or path.is_symlink() or not path.is_dir():
            continue
        pid, start = int(owner.group(1)), int(owner.group(2))
        if process_start(pid) == start or (start == 0 and _alive(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    """Without ``/proc`` only the pid can be checked (a reused pid keeps a stale folder, never the reverse)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
