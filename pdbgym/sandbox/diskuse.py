"""How much host disk a workspace takes, and a watcher that stops its commands when it grows over a cap.

RLIMIT_FSIZE bounds each file a sandboxed command writes, not how many: the workspace is on the host's
disk, so a command writing many files (or a background process started from pdb, which keeps running
between tool calls) fills it. ``measure`` walks the workspace from folder descriptors without following
links (``O_NOFOLLOW``, one ``lstat`` per entry, as ``os.fwalk(follow_symlinks=False)`` would) and counts
allocated bytes (``st_blocks``: what the disk holds, so a sparse file costs what it stores; hard links
once) and entries (files, folders, links, anything). The walk stops once the entry count is over what is
asked, and a tree nested deeper than ``MAX_DEPTH`` folders counts as over any cap (walking it would need
a descriptor per level).

``DiskWatcher`` walks the workspace on a thread every ``interval_s`` (less often for a tree that takes
long to walk, so the regular walks cost at most about a tenth of a core). Between walks it reads the free
bytes and inodes of the workspace's filesystem (``statvfs``, one cheap call) every ``TICK_S``: page-cache
writes at gigabytes a second, or thousands of new files, show there at once. The last walk's figures
plus what the filesystem lost since are an estimate of the usage; an estimate over the ceiling starts a
walk at once, and a drop of ``TRIGGER_BYTES`` or ``TRIGGER_FILES`` starts one soon (the filesystem is
shared with the host, so the estimate only decides when to walk, never what to stop). The watcher calls
``on_over`` when a walk finds the usage over its ceiling: the cap, or, after the cap was passed, the usage
left at that moment plus a little slack (so commands that do not add to an over-cap workspace, such as a
restarted debugger or one deleting files, keep running, and the ceiling follows the usage back down to
the cap).
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAX_DEPTH = 128  # folders below the root; honest projects stay far below
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Between two walks at least this many times as long as the last walk took (at most a tenth of a core).
_IDLE_FACTOR = 10.0
TICK_S = 0.01  # how often the filesystem's free space is read between walks
TRIGGER_BYTES = 8 * 1024**2  # a drop in free space this large since the last walk starts one at once
TRIGGER_FILES = 500  # likewise for free inodes
_TRIGGER_FACTOR = 2.0  # walks started by such a drop: at least this many times the last walk's time apart
# Room above the usage left after stopping the commands: writeback still allocates a few blocks (extent
# trees), which must not count as the restarted debugger writing.
SLACK = (4 * 1024**2, 64)


@dataclass(frozen=True)
class DiskUsage:
    """Allocated bytes and entries under a root. ``complete`` is False when the walk stopped early (past
    the entry limit it was given, or deeper than ``MAX_DEPTH``): the figures are then at least that."""

    bytes: int
    files: int
    complete: bool = True
    too_deep: bool = False

    def over(self, limit: DiskLimit) -> bool:
        return self.too_deep or self.bytes > limit.bytes or self.files > limit.files

    def describe(self) -> str:
        mib = self.bytes / 1024**2
        more = "" if self.complete else " or more"
        deep = f" (nested deeper than {MAX_DEPTH} folders)" if self.too_deep else ""
        return f"{mib:,.1f} MiB in {self.files:,} files and folders{more}{deep}"


@dataclass(frozen=True)
class DiskLimit:
    """At most ``bytes`` allocated bytes and ``files`` entries (files, folders, links) under a root."""

    bytes: int
    files: int

    def describe(self) -> str:
        return f"{self.bytes / 1024**2:,.1f} MiB and {self.files:,} files and folders"


class _Folder:
    """An open folder descriptor, closed once every subfolder in it has been opened."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pending = 0

    def release(self) -> None:
        self.pending -= 1
        if self.pending <= 0:
            os.close(self.fd)


def measure(root: Path | str, stop_after_files: int | None = None) -> DiskUsage:
    """The usage of everything under ``root`` (the root itself not counted), links never followed.

    Depth first, a folder's descriptor kept open only until its last subfolder is opened, so the
    descriptors held at once are at most the depth (``MAX_DEPTH``), however wide the tree."""
    total, count = 0, 0
    seen: set[tuple[int, int]] = set()  # (device, inode) of files with several links, counted once
    root_folder = _Folder(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW))
    root_folder.pending = 1
    stack: list[tuple[_Folder, str, int]] = []
    current: _Folder | None = root_folder
    depth = 0
    try:
        while current is not None:
            names = []
            with os.scandir(current.fd) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed while walking
                    count += 1
                    if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                        key = (info.st_dev, info.st_ino)
                        if key in seen:
                            continue
                        seen.add(key)
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        names.append(entry.name)
            if stop_after_files is not None and count > stop_after_files:
                return DiskUsage(total, count, complete=False)
            if names and depth >= MAX_DEPTH:
                return DiskUsage(total, count, complete=False, too_deep=True)
            current.pending += len(names)
            stack += [(current, name, depth + 1) for name in names]
            current.release()  # the hold it had while being listed
            current = None
            while stack and current is None:
                parent, name, depth = stack.pop()
                try:
                    current = _Folder(os.open(name, _DIR_FLAGS, dir_fd=parent.fd))
                    current.pending = 1
                except OSError as exc:
                    if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                        raise  # gone or swapped for a link or a file meanwhile: nothing to descend into
                finally:
                    parent.release()
    finally:
        if current is not None:
            os.close(current.fd)
        for parent, _, _ in stack:
            parent.release()
    return DiskUsage(total, count)


class DiskWatcher:
    """Measures ``root`` on a thread and calls ``on_over(usage)`` whenever it is over its ceiling.

    The ceiling starts at ``limit``. When the usage passes it, ``on_over`` runs (it stops the commands
    writing) and the ceiling becomes the usage measured right after, never below ``limit``; as the usage
    falls, the ceiling follows it down to ``limit``. ``stop()`` ends the thread; safe to call twice.
    """

    def __init__(self, root: Path, limit: DiskLimit, on_over: Callable[[DiskUsage], None],
                 interval_s: float = 0.2) -> None:
        self.root = root
        self.limit = limit
        self.on_over = on_over
        self.interval_s = interval_s
        self.trips = 0  # times on_over ran
        self.peak: DiskUsage | None = None  # the largest usage seen when over the ceiling
        self.last: DiskUsage | None = None  # the latest walk's figures
        self._ceiling = limit
        self._baseline: tuple[int, int] | None = None  # the filesystem's free bytes and inodes at the last walk
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"disk-watcher {root.name}", daemon=True)

    def start(self) -> DiskWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _free(self) -> tuple[int, int]:
        """Free bytes and inodes of the workspace's filesystem (shared with the host: only a hint)."""
        try:
            info = os.statvfs(self.root)
        except OSError:
            return (0, 0)
        return info.f_bfree * info.f_frsize, info.f_ffree

    def _loop(self) -> None:
        next_walk = earliest = 0.0
        baseline = self._free()
        while not self._stop.is_set():
            now = time.monotonic()
            free = self._free()
            grown_bytes, grown_files = baseline[0] - free[0], baseline[1] - free[1]
            ceiling, last = self._ceiling, self.last
            estimate_over = last is not None and (last.bytes + grown_bytes > ceiling.bytes
                                                  or last.files + grown_files > ceiling.files)
            dropped = grown_bytes >= TRIGGER_BYTES or grown_files >= TRIGGER_FILES
            if now >= next_walk or estimate_over or (dropped and now >= earliest):
                baseline = self._baseline = free  # what is written during the walk shows as growth later
                try:
                    self.check()
                except OSError:
                    pass  # the workspace is being removed (episode over); the next round or stop() ends it
                finished = time.monotonic()
                earliest = finished + _TRIGGER_FACTOR * (finished - now)
                next_walk = finished + max(self.interval_s, _IDLE_FACTOR * (finished - now))
            self._stop.wait(TICK_S)

    def looks_over(self) -> bool:
        """The thread's cheap estimate, from any thread: the last walk's figures plus what the filesystem
        lost since (free bytes and inodes, shared with the host, so at worst an overestimate) exceed the
        ceiling. False before the first walk."""
        last, baseline, ceiling = self.last, self._baseline, self._ceiling
        if last is None or baseline is None:
            return False
        free = self._free()
        return (last.bytes + baseline[0] - free[0] > ceiling.bytes
                or last.files + baseline[1] - free[1] > ceiling.files)

    def check(self) -> DiskUsage:
        """Walk once and act as the thread does; return the usage found (before any stopping)."""
        ceiling = self._ceiling
        # Past twice the ceiling the exact figure no longer matters: the walk stops there.
        bound = 2 * ceiling.files + 1000
        usage = measure(self.root, stop_after_files=bound)
        self.last = usage
        if usage.over(ceiling):
            self.trips += 1
            if self.peak is None or usage.bytes > self.peak.bytes or usage.files > self.peak.files:
                self.peak = usage
            self.on_over(usage)
            after = self.last = measure(self.root, stop_after_files=bound)
            self._ceiling = DiskLimit(max(self.limit.bytes, after.bytes + SLACK[0]),
                                      max(self.limit.files, after.files + SLACK[1]))
        else:
            self._ceiling = DiskLimit(max(self.limit.bytes, min(ceiling.bytes, usage.bytes + SLACK[0])),
                                      max(self.limit.files, min(ceiling.files, usage.files + SLACK[1])))
        return usage
