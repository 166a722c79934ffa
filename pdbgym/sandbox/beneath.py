"""Host-side access to paths inside a workspace that never leaves it, whatever the sandbox does meanwhile.

The workspace is writable by sandboxed processes that run while the host reads and writes it (a pdb
session's background process keeps running between tool calls). A path checked once and opened again
by name is followed afresh at each open, so such a process can swap a folder for a symlink to a host
folder in between (``renameat2(RENAME_EXCHANGE)`` in a loop) and point the host's read or write at a
host file. Here every access starts from a descriptor of the root and walks one component at a time
with ``O_NOFOLLOW`` relative to the folder descriptor reached so far, as ``openat2(RESOLVE_BENEATH)``
would: a name is looked up exactly once, in a folder already known to be inside the root.

A symlink met on the way (where links are followed at all) is not opened: its target is read and
spliced into the rest of the path, then walked the same way from the folder holding the link, so
honest in-tree links keep working. ``..`` steps back to the folder descriptor the walk came from and
never above the root; absolute targets, NUL bytes and more than ``MAX_LINK_HOPS`` links are refused.
Files are checked with ``fstat`` on the opened descriptor, and writes go to a fresh temporary file
created with ``O_EXCL | O_NOFOLLOW`` in the parent folder's descriptor, then renamed over the name in
that same folder.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

MAX_LINK_HOPS = 40  # as the kernel's own limit on links followed in one lookup
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO the sandbox put in place of a file must not wait for a writer.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
# What opening a link with O_NOFOLLOW (or a link as a folder) answers.
_LINK_ERRNOS = (errno.ELOOP, errno.ENOTDIR)
TEMP_PREFIX = ".pdbgym-edit-"  # hidden from listings and never taken by grading (".pdbgym-" files)

T = TypeVar("T")


class LeavesRoot(OSError):
    """The path, or a link on it, leads outside the root (absolute, ``..`` above it, a NUL byte)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EXDEV, message)

    def __str__(self) -> str:
        return str(self.strerror)


def _components(path: str, what: str) -> list[str]:
    if "\0" in path:
        raise LeavesRoot(f"{what} {path!r} holds a NUL byte")
    if path.startswith("/"):
        raise LeavesRoot(f"{what} {path!r} is absolute; only paths relative to the project root stay inside it")
    return [part for part in path.split("/") if part not in ("", ".")]


class _Walk:
    """Folder descriptors from the root down to the current folder, with their names."""

    def __init__(self, root: Path | str) -> None:
        self.fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
        self.names: list[str] = []

    @property
    def fd(self) -> int:
        return self.fds[-1]

    def relative(self, name: str | None = None) -> str:
        return "/".join([*self.names, *([name] if name else [])]) or "."

    def down(self, name: str) -> None:
        self.fds.append(os.open(name, _DIR_FLAGS, dir_fd=self.fd))
        self.names.append(name)

    def up(self, given: str) -> None:
        if not self.names:
            raise LeavesRoot(f"'{given}' leads above the project root")
        os.close(self.fds.pop())
        self.names.pop()

    def close(self, keep_top: bool = False) -> None:
        for fd in self.fds[:-1] if keep_top else self.fds:
            os.close(fd)
        self.fds = self.fds[-1:] if keep_top else []


def _walk(root: Path | str, rel: str, follow_links: bool, last: Callable[[_Walk, str], T]) -> tuple[_Walk, T]:
    """Walk ``rel`` beneath ``root``; ``last(walk, name)`` acts on the final component (``name`` is ""
    when the path ends at a folder: the root, or a trailing ``..``). A link where ``last`` or a folder
    lookup meets one (ELOOP/ENOTDIR) is spliced in when ``follow_links``, else the error stands."""
    pending = deque(_components(rel, "path"))
    walk = _Walk(root)
    hops = 0
    try:
        while True:
            if not pending:
                return walk, last(walk, "")
            part = pending.popleft()
            if part == "..":
                walk.up(rel)
                continue
            try:
                if pending:
                    walk.down(part)
                    continue
                return walk, last(walk, part)
            except OSError as exc:
                if not follow_links or exc.errno not in _LINK_ERRNOS:
                    raise
                try:
                    target = os.readlink(part, dir_fd=walk.fd)
                except OSError:
                    raise exc from None  # not a link: a file where a folder was asked for
            hops += 1
            if hops > MAX_LINK_HOPS:
                raise OSError(errno.ELOOP, f"more than {MAX_LINK_HOPS} links on the way to '{rel}'")
            if target.startswith("/"):
                raise LeavesRoot(f"'{walk.relative(part)}' is a link to the absolute path {target!r}; "
                                 "only links inside the project are followed")
            pending.extendleft(reversed(_components(target, f"link '{walk.relative(part)}' target")))
    except BaseException:
        walk.close()
        raise


def open_beneath(root: Path | str, rel: str, *, follow_links: bool = True) -> tuple[int, str]:
    """A read-only descriptor of the file or folder ``rel`` beneath ``root``, and its path relative to
    ``root`` with links resolved. The caller closes the descriptor and checks its kind with ``fstat``."""

    def opened(walk: _Walk, name: str) -> tuple[int, str]:
        if not name:  # the folder the walk stands in
            return os.dup(walk.fd), walk.relative()
        return os.open(name, _OPEN_FLAGS, dir_fd=walk.fd), walk.relative(name)

    walk, (fd, resolved) = _walk(root, rel, follow_links, opened)
    walk.close()
    return fd, resolved


def parent_beneath(root: Path | str, rel: str, *, follow_links: bool = True) -> tuple[int, str, str]:
    """``(folder descriptor, name, resolved rel)``: the folder holding ``rel``'s final component, which is
    not a link (a final link is resolved beneath ``root``) and may not exist. The caller closes the fd."""

    def final(walk: _Walk, name: str) -> str:
        if not name:
            raise IsADirectoryError(errno.EISDIR, f"'{rel}' is a folder")
        if stat.S_ISLNK(_lstat_or_none(walk.fd, name)):
            raise OSError(errno.ELOOP, f"'{walk.relative(name)}' is a link")  # spliced by _walk
        return name

    walk, name = _walk(root, rel, follow_links, final)
    walk.close(keep_top=True)
    return walk.fd, name, walk.relative(name)


def _lstat_or_none(dir_fd: int, name: str) -> int:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return 0


def read_bytes(root: Path | str, rel: str, limit: int, *, follow_links: bool = True) -> tuple[bytes, str]:
    """The bytes of the regular file ``rel`` beneath ``root`` (at most ``limit``, else ``OSError``) and its
    resolved relative path."""
    fd, resolved = open_beneath(root, rel, follow_links=follow_links)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"'{resolved}' is a folder")
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"'{resolved}' is not a regular file")
        if info.st_size > limit:
            raise OSError(errno.EFBIG, f"'{resolved}' holds {info.st_size} bytes, over the {limit} read here")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                raise OSError(errno.EFBIG, f"'{resolved}' grew over the {limit} bytes read here")
            chunks.append(chunk)
        return b"".join(chunks), resolved
    finally:
        os.close(fd)


def replace_file(root: Path | str, rel: str, data: bytes, *, follow_links: bool = True) -> str:
    """Atomically replace the existing regular file ``rel`` beneath ``root`` with ``data``, keeping its
    permission bits; return its resolved relative path. A sandboxed reader sees the old file or the new
    one; on any failure the temporary file is removed and the file is left as it was."""
    dir_fd, name, resolved = parent_beneath(root, rel, follow_links=follow_links)
    temp = f"{TEMP_PREFIX}{secrets.token_hex(8)}.tmp"
    created = False
    try:
        old = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
        try:
            info = os.fstat(old)
        finally:
            os.close(old)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, f"'{resolved}' is not a regular file")
        out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                      dir_fd=dir_fd)
        created = True
        try:
            # The old file's permission bits, not its set-id bits: the new file is created by the host.
            os.fchmod(out, info.st_mode & 0o777)
            view = memoryview(data)
            while view:
                view = view[os.write(out, view):]
        finally:
            os.close(out)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        created = False
        return resolved
    finally:
        if created:
            try:
                os.unlink(temp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
        os.close(dir_fd)


def list_folder(root: Path | str, rel: str) -> tuple[str, list[tuple[str, int]]]:
    """``(resolved rel, [(name, lstat mode)])`` of the folder ``rel`` beneath ``root``, names sorted.
    Entries are read from the folder's descriptor and never followed."""
    fd, resolved = open_beneath(root, rel)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, f"'{resolved}' is not a folder")
        entries = []
        for name in sorted(os.listdir(fd)):
            try:
                entries.append((name, os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode))
            except FileNotFoundError:
                continue  # removed while listing
        return resolved, entries
    finally:
        os.close(fd)


def kind_beneath(root: Path | str, rel: str) -> int:
    """The mode of what ``rel`` (links resolved beneath ``root``) is, or 0 when it leads nowhere inside."""
    try:
        fd, _ = open_beneath(root, rel)
    except OSError:
        return 0
    try:
        return os.fstat(fd).st_mode
    finally:
        os.close(fd)
