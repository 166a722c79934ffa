"""A confined process attached to a pseudo-terminal, read by polling its descriptor (never sleep-polling)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import weakref
from types import TracebackType

from pdbgym.fdwait import readable
from pdbgym.sandbox.cgroup import CommandCgroup
from pdbgym.sandbox.process import cmdline, descendants, kill_tree

READ_CHUNK_BYTES = 65536


class PtyTerminal:
    """The master side of a raw pty: what ``PtyProcess`` and a pytest fork server's pdb job
    (``pdbgym.sandbox.zygote.ZygotePty``) share. Subclasses set ``master_fd``."""

    master_fd: int

    @property
    def pid(self) -> int:
        """The child's process id in this process's PID namespace."""
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        """Write all of ``data`` to the child's stdin."""
        view = memoryview(data)
        while view:
            written = os.write(self.master_fd, view)
            view = view[written:]

    def read(self, timeout_s: float) -> bytes | None:
        """Bytes the child wrote, waiting at most ``timeout_s`` seconds.

        Returns b"" on timeout and None once the child side is closed (every holder exited).
        """
        if not readable([self.master_fd], max(timeout_s, 0.0)):
            return b""
        try:
            data = os.read(self.master_fd, READ_CHUNK_BYTES)
        except OSError as exc:
            if exc.errno == errno.EIO:  # Linux reports a closed slave side as EIO
                return None
            raise
        return data or None

    def signal_process(self, pid: int, signum: int = signal.SIGINT) -> bool:
        """Send ``signum`` to one process of the tree; False if it is gone."""
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return False
        return True


class PtyProcess(PtyTerminal):
    """The master side of a pty whose slave is the child's stdin, stdout and stderr.

    The terminal is raw (no echo, no line editing, no signals from control characters, no ``\\r\\n``
    translation): commands are not echoed into the output, lines of any length pass, and a stray
    ``\\x03`` cannot signal anything. Use ``signal_process`` to interrupt a chosen process instead.
    """

    def __init__(self, popen: subprocess.Popen, master_fd: int, cgroup: CommandCgroup | None) -> None:
        self.popen = popen
        self.master_fd = master_fd
        self.cgroup = cgroup
        self.returncode: int | None = None
        self._closed = False
        # A session dropped without close() must not leave its tree running (the plain backend has
        # no --die-with-parent) nor its cgroup folders: end both when collected or at interpreter exit.
        self._finalizer = weakref.finalize(self, _abandon, popen, cgroup)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return not self._closed and self.popen.poll() is None

    def descendants(self) -> list[int]:
        return descendants(self.pid)

    def find_process(self, marker: str) -> int | None:
        """The innermost process of the tree whose argv contains ``marker``.

        Innermost, because a wrapper (bwrap) carries the inner command's argv among its own.
        """
        found = None
        for pid in [self.pid, *self.descendants()]:
            if any(marker in part for part in cmdline(pid)):
                found = pid
        return found

    def kill(self) -> None:
        """SIGKILL the child's process group now; ``close`` reaps and cleans up later."""
        if not self._closed:
            _kill_group(self.pid)

    def close(self) -> int | None:
        """Kill the whole tree, reap the child, close the terminal. Safe to call twice."""
        if self._closed:
            return self.returncode
        self._closed = True
        self._finalizer.detach()
        self.returncode = kill_tree(self.popen, self.cgroup)
        os.close(self.master_fd)
        return self.returncode

    def __enter__(self) -> PtyProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _abandon(popen: subprocess.Popen, cgroup: CommandCgroup | None) -> None:
    _kill_group(popen.pid)
    if cgroup is not None:
        cgroup.kill_all()
        try:
            popen.wait(timeout=2.0)  # a member leaves its cgroup once reaped
        except subprocess.TimeoutExpired:
            pass
        cgroup.remove()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
