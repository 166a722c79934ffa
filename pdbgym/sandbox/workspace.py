"""Each episode works on its own copy of the task's repo."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import TracebackType

from pdbgym.errors import SandboxError

# Caches from a previous run would leak state between episodes and slow the copy.
_NOT_COPIED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache", ".ruff_cache")


class Workspace:
    """A private, writable copy of a project. ``path`` is its root; use as a context manager."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, source_repo: Path, parent: Path | None = None) -> Workspace:
        """Copy ``source_repo`` into a fresh folder under ``parent`` (default: the system temp dir)."""
        source_repo = Path(source_repo)
        if not source_repo.is_dir():
            raise SandboxError(
                f"cannot create a workspace: {source_repo} is not a folder; pass the task's repo folder"
            )
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="pdbgym-ws-", dir=parent)).resolve()
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
