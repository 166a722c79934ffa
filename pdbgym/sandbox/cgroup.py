"""A per-command cgroup with a pids limit: bounds fork bombs even for root, and finds every process.

RLIMIT_NPROC counts all processes of the real uid and the kernel never enforces it for root, so where
a pids cgroup can be created (cgroup v1 ``/sys/fs/cgroup/pids`` or a v2 hierarchy with the pids
controller delegated) it is the primary bound. Creating one is a mkdir and two small writes.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

_CANDIDATE_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
_PARENT_NAME = "pdbgym"
_usable_root: Path | None | bool = False  # False: not probed yet


def _probe_root() -> Path | None:
    for root in _CANDIDATE_ROOTS:
        is_v1 = (root / "cgroup.procs").exists() and root.name == "pids"
        is_v2 = (root / "cgroup.subtree_control").exists() and "pids" in _read(root / "cgroup.controllers")
        if not (is_v1 or is_v2):
            continue
        parent = root / _PARENT_NAME
        try:
            parent.mkdir(exist_ok=True)
            if is_v2:
                (parent / "cgroup.subtree_control").write_text("+pids")
            probe = parent / f"probe-{uuid.uuid4().hex[:8]}"
            probe.mkdir()
            probe.rmdir()
        except OSError:
            continue
        return parent
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def pids_cgroup_root() -> Path | None:
    """The folder under which per-command pids cgroups are made, or None where none can be made."""
    global _usable_root
    if _usable_root is False:
        _usable_root = _probe_root()
    return _usable_root  # type: ignore[return-value]


class PidsCgroup:
    """One cgroup holding one command's processes, limited to ``max_pids`` tasks."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, max_pids: int) -> PidsCgroup | None:
        """A fresh cgroup, or None where pids cgroups are not available here."""
        root = pids_cgroup_root()
        if root is None:
            return None
        path = root / f"cmd-{uuid.uuid4().hex}"
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(max_pids))
        except OSError:
            return None
        return cls(path)

    def open_procs_fd(self) -> int:
        """A write fd on ``cgroup.procs``; a child writes its pid there before exec to join."""
        return os.open(self.path / "cgroup.procs", os.O_WRONLY)

    def pids(self) -> list[int]:
        return [int(line) for line in _read(self.path / "cgroup.procs").split()]

    def kill_all(self) -> None:
        """SIGKILL every member until none is left (a fork bomb may fork while we kill)."""
        for _ in range(1000):
            members = self.pids()
            if not members:
                return
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def remove(self) -> None:
        """Delete the cgroup folder; the kernel refuses while members remain, so kill them first."""
        deadline = time.monotonic() + 2.0
        while True:
            self.kill_all()
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # a zombie not yet reaped by its parent; the empty folder is harmless
                # Killed members leave the cgroup only once reaped by their parent: give it a moment.
                time.sleep(0.001)
