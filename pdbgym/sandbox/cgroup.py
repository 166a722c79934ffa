"""Per-command cgroups: a pids limit (fork bombs, even for root), a memory limit for the whole process
tree, and a list of every process to kill.

RLIMIT_NPROC counts all processes of the real uid and the kernel never enforces it for root; RLIMIT_AS
bounds each process alone, so four children of 1.5 GiB pass a 2 GiB limit. A cgroup bounds the tree:

- pids: cgroup v1 ``/sys/fs/cgroup/pids/pdbgym/pdbgym-cmd-*``, or v2 ``/sys/fs/cgroup/pdbgym/pdbgym-cmd-*``
  with the pids controller delegated;
- memory: v1 ``memory.limit_in_bytes`` plus ``memory.memsw.limit_in_bytes`` at the same value (no
  swap), in a ``pdbgym-cmd-*`` child of this process's own memory cgroup (so a limit placed on the
  caller still holds above it); v2 ``memory.max`` with ``memory.swap.max`` 0, beside the pids limit.

Where neither can be created, ``CommandCgroup.create`` returns None; where memory alone cannot,
``warn_once`` logs that memory is limited per process only (see docs/sandbox.md). Creating one is a
few mkdirs and small writes.
"""

from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from pathlib import Path

logger = logging.getLogger(__name__)

_V1_ROOT = Path("/sys/fs/cgroup")
_V2_ROOT = Path("/sys/fs/cgroup")
_PARENT_NAME = "pdbgym"
_probed: dict[str, Path | None] = {}
_warned: set[str] = set()


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _usable(parent: Path, enable: str | None = None) -> bool:
    """Whether a child cgroup can be made and removed under ``parent`` (created if missing)."""
    try:
        parent.mkdir(exist_ok=True)
        if enable is not None:
            (parent / "cgroup.subtree_control").write_text(enable)
        probe = parent / f"probe-{uuid.uuid4().hex[:8]}"
        probe.mkdir()
        probe.rmdir()
    except OSError:
        return False
    return True


def _is_v2() -> bool:
    return (_V2_ROOT / "cgroup.subtree_control").exists()


def _own_v1_path(controller: str) -> str:
    """This process's cgroup in a v1 hierarchy (``/proc/self/cgroup`` line ``N:memory:/path``)."""
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path.lstrip("/")
    return ""


def _probe(controller: str) -> Path | None:
    if _is_v2():
        if controller not in _read(_V2_ROOT / "cgroup.controllers").split():
            return None
        parent = _V2_ROOT / _PARENT_NAME
        return parent if _usable(parent, f"+{controller}") else None
    root = _V1_ROOT / controller
    if not (root / "cgroup.procs").exists():
        return None
    # pids: a shared parent at the top (as before). memory: directly in our own cgroup, so a memory
    # limit the caller runs under still holds above ours (v1 charges parents with use_hierarchy), and no
    # folder of ours outlives the command inside a cgroup someone else manages.
    parent = root / _PARENT_NAME if controller == "pids" else root / _own_v1_path(controller)
    return parent if _usable(parent) else None


def cgroup_parent(controller: str) -> Path | None:
    """The folder under which per-command cgroups of ``controller`` ("pids", "memory") are made."""
    if controller not in _probed:
        _probed[controller] = _probe(controller)
        if _probed[controller] is not None:
            _remove_stale(_probed[controller])
    return _probed[controller]


STALE_AFTER_S = 60.0


def _remove_stale(parent: Path) -> None:
    """Remove empty command cgroups left by a killed process (older than a minute, so never one that a
    live process has just made and not yet joined)."""
    now = time.time()
    for path in parent.glob("pdbgym-cmd-*"):
        try:
            if now - path.stat().st_mtime > STALE_AFTER_S and not _read(path / "cgroup.procs").strip():
                path.rmdir()
        except OSError:
            continue


def pids_cgroup_root() -> Path | None:
    """The folder under which per-command pids cgroups are made, or None where none can be made."""
    return cgroup_parent("pids")


def memory_cgroup_available() -> bool:
    """Whether a memory limit for a whole process tree can be set here."""
    return cgroup_parent("memory") is not None


def warn_once(what: str, message: str) -> None:
    if what not in _warned:
        _warned.add(what)
        logger.warning(message)


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
    except OSError:
        return False
    return True


class CommandCgroup:
    """The cgroup folders holding one command's processes (one per v1 hierarchy, one for v2)."""

    def __init__(self, paths: list[Path], bounds_pids: bool) -> None:
        self.paths = paths
        self.bounds_pids = bounds_pids  # False: RLIMIT_NPROC must still bound the process count

    @classmethod
    def create(cls, max_pids: int, memory_bytes: int) -> CommandCgroup | None:
        """Fresh cgroups limiting the tree to ``max_pids`` tasks and ``memory_bytes`` of memory (no
        swap), or None where no cgroup can be made. Missing memory support is warned about once."""
        name = f"pdbgym-cmd-{uuid.uuid4().hex}"
        if _is_v2():
            return cls._create_v2(name, max_pids, memory_bytes)
        paths: list[Path] = []
        pids_parent, memory_parent = cgroup_parent("pids"), cgroup_parent("memory")
        has_pids = False
        if pids_parent is not None and _mkdir(pids_parent / name):
            has_pids = _write(pids_parent / name / "pids.max", str(max_pids))
            if has_pids:
                paths.append(pids_parent / name)
            else:
                _rmdir(pids_parent / name)
        if memory_parent is not None and _mkdir(memory_parent / name):
            memory = memory_parent / name
            # The swap-inclusive limit must stay >= the memory limit: set memory first.
            limited = _write(memory / "memory.limit_in_bytes", str(memory_bytes))
            swap_file = memory / "memory.memsw.limit_in_bytes"
            if limited and (not swap_file.exists() or _write(swap_file, str(memory_bytes))):
                paths.append(memory)
            else:
                _rmdir(memory)
                memory_parent = None
        if memory_parent is None:
            _warn_no_memory_cgroup()
        return cls(paths, has_pids) if paths else None

    @classmethod
    def _create_v2(cls, name: str, max_pids: int, memory_bytes: int) -> CommandCgroup | None:
        parent = cgroup_parent("pids") or cgroup_parent("memory")
        if parent is None or not _mkdir(parent / name):
            _warn_no_memory_cgroup()
            return None
        path = parent / name
        has_memory = cgroup_parent("memory") is not None and _write(path / "memory.max", str(memory_bytes))
        if has_memory:
            _write(path / "memory.swap.max", "0")  # absent without swap accounting: nothing to turn off
        else:
            _warn_no_memory_cgroup()
        bounds_pids = cgroup_parent("pids") is not None and _write(path / "pids.max", str(max_pids))
        return cls([path], bounds_pids)

    def open_procs_fds(self) -> list[int]:
        """Write fds on each ``cgroup.procs``; a child writes "0" to each before exec to join."""
        fds: list[int] = []
        try:
            for path in self.paths:
                fds.append(os.open(path / "cgroup.procs", os.O_WRONLY))
        except OSError:
            for fd in fds:
                os.close(fd)
            raise
        return fds

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.paths:
            found.update(int(line) for line in _read(path / "cgroup.procs").split())
        return sorted(found)

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
        """Delete the cgroup folders; the kernel refuses while members remain, so kill them first."""
        deadline = time.monotonic() + 2.0
        remaining = list(self.paths)
        while remaining:
            self.kill_all()
            remaining = [path for path in remaining if not _rmdir(path)]
            if remaining and time.monotonic() > deadline:
                return  # a zombie not yet reaped by its parent; the empty folder is harmless
            if remaining:
                # Killed members leave the cgroup only once reaped by their parent: give it a moment.
                time.sleep(0.001)


def _mkdir(path: Path) -> bool:
    try:
        path.mkdir()
    except OSError:
        return False
    return True


def _rmdir(path: Path) -> bool:
    """True once ``path`` is gone."""
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _warn_no_memory_cgroup() -> None:
    warn_once("memory", "sandbox: no memory cgroup can be created here (cgroup v1 memory hierarchy or v2 "
                        "memory controller not writable): memory is limited per process only (RLIMIT_AS), so "
                        "a command's processes together may use more than Limits.memory_bytes")
