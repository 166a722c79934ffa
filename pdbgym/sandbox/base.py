"""The ``Sandbox`` interface: a backend is one class implementing ``wrap``; running is shared."""

from __future__ import annotations

import copy
import os
import pty
import selectors
import subprocess
import termios
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

from pdbgym.errors import SandboxError
from pdbgym.sandbox.cgroup import CommandCgroup
from pdbgym.sandbox.cpuwait import CommandClock
from pdbgym.sandbox.environment import sandbox_env
from pdbgym.sandbox.limits import Limits, RunResult
from pdbgym.sandbox.output import BoundedOutput
from pdbgym.sandbox.process import confine, gated, kill_tree, register_command, rlimits_for
from pdbgym.sandbox.pty_process import READ_CHUNK_BYTES, PtyProcess

# After the command exits, output still buffered in the pipe is read for at most this long; a
# background process that keeps the pipe open must not hold the caller.
_DRAIN_AFTER_EXIT_S = 0.2


class Sandbox(ABC):
    """Runs commands confined to a workspace. Subclasses say how, by turning argv into wrapped argv."""

    name: str = "abstract"
    isolated: bool = False
    # Whether ``run`` can bind paths of the workspace read-only (``readonly_paths``); a backend that
    # cannot refuses them rather than run the command with the paths writable.
    binds_readonly: bool = False
    # Whether the backend mounts a task environment as the interpreter's site-packages
    # (``pdbgym.sandbox.pyenv``); ``site_packages`` is the one it mounts (None: the runner's alone).
    mounts_environments: bool = False
    site_packages: Path | None = None

    def with_site_packages(self, site_packages: Path | None) -> Sandbox:
        """This sandbox with ``site_packages`` mounted as its commands' packages (a copy; None: the runner
        environment). A backend that cannot mount one refuses, naming the folder."""
        if site_packages is not None and not self.mounts_environments:
            raise SandboxError(f"the {self.name} sandbox cannot mount a task environment ({site_packages}); "
                               "tasks with requirements need the bwrap sandbox")
        other = copy.copy(self)
        other.site_packages = Path(site_packages) if site_packages is not None else None
        return other

    @abstractmethod
    def wrap(self, argv: list[str], workspace: Path, limits: Limits,
             readonly_paths: Sequence[Path] = ()) -> list[str]:
        """The argv that runs ``argv`` confined, with ``workspace`` as working directory and each of
        ``readonly_paths`` (checked: inside the workspace, no links) read-only for the whole run."""

    def run(
        self,
        argv: Sequence[str],
        workspace: Path,
        limits: Limits = Limits(),
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        readonly_paths: Sequence[str | Path] = (),
        pass_fds: Sequence[int] = (),
    ) -> RunResult:
        """Run ``argv`` to completion (or ``limits.wall_time_s``) and return its bounded output.

        ``readonly_paths`` (files or folders inside ``workspace``) are bound read-only over the writable
        workspace: the command can neither write, replace, rename nor remove them, nor rename a folder
        holding one. Only where ``binds_readonly``; elsewhere giving any raises ``SandboxError``.

        ``pass_fds`` are handed over: the command inherits each at its number, and this process's copies
        are closed as soon as the command has started (or failed to), so a reader of the other end of a
        pipe sees EOF when the command's process tree is gone.
        """
        try:
            argv, workspace = _check_request(argv, workspace)
            readonly = self._check_readonly(readonly_paths, workspace)
            env = sandbox_env(workspace) if env is None else env
            started = time.monotonic()
            try:
                popen, cgroup = self._popen(
                    argv, workspace, limits, env, readonly, pass_fds=tuple(pass_fds),
                    stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                )
            except FileNotFoundError as exc:
                return RunResult(argv, 127, f"sandbox: cannot execute {argv[0]!r}: {exc.strerror}",
                                 False, time.monotonic() - started, 0, False)
        finally:
            _close_all(pass_fds)
        output = BoundedOutput(limits.output_limit_bytes)
        try:
            timed_out = _pump(popen, (stdin or "").encode(), output, CommandClock(popen.pid, limits.wall_time_s))
        finally:
            returncode = kill_tree(popen, cgroup)
        return RunResult(
            argv=argv, returncode=returncode, output=output.text(), timed_out=timed_out,
            duration_s=time.monotonic() - started, bytes_total=output.bytes_total,
            truncated=output.truncated,
        )

    def spawn_pty(
        self,
        argv: Sequence[str],
        workspace: Path,
        limits: Limits,
        env: dict[str, str] | None = None,
    ) -> PtyProcess:
        """Start ``argv`` confined, with a raw pty as stdin/stdout/stderr. The caller must close it."""
        argv, workspace = _check_request(argv, workspace)
        env = sandbox_env(workspace) if env is None else env
        master_fd, slave_fd = pty.openpty()
        make_raw(slave_fd)
        try:
            popen, cgroup = self._popen(argv, workspace, limits, env, [],
                                        stdin=slave_fd, stdout=slave_fd, stderr=slave_fd)
        except FileNotFoundError as exc:
            os.close(master_fd)
            raise SandboxError(f"cannot start {argv[0]!r}: {exc.strerror}; check the program path") from exc
        finally:
            os.close(slave_fd)
        return PtyProcess(popen, master_fd, cgroup)

    def spawn(
        self,
        argv: Sequence[str],
        workspace: Path,
        limits: Limits,
        env: dict[str, str] | None = None,
        readonly_paths: Sequence[str | Path] = (),
        pass_fds: Sequence[int] = (),
    ) -> Spawned:
        """Start ``argv`` confined and return at once: a long-lived command (the pytest fork server,
        ``pdbgym.sandbox.zygote``) that the caller talks to through ``pass_fds`` (handed over and closed
        here, as in ``run``). Its stdin is ``/dev/null``; its stdout and stderr go to ``Spawned.output_fd``,
        a pipe the caller may read. ``Spawned.close`` ends its whole tree; ``limits.wall_time_s`` is not
        applied (the caller bounds each use)."""
        try:
            argv, workspace = _check_request(argv, workspace)
            readonly = self._check_readonly(readonly_paths, workspace)
            env = sandbox_env(workspace) if env is None else env
            read_fd, write_fd = os.pipe()
            try:
                popen, cgroup = self._popen(argv, workspace, limits, env, readonly, pass_fds=tuple(pass_fds),
                                            stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd)
            except FileNotFoundError as exc:
                os.close(read_fd)
                raise SandboxError(f"cannot start {argv[0]!r}: {exc.strerror}; check the program path") from exc
            finally:
                os.close(write_fd)
        finally:
            _close_all(pass_fds)
        os.set_blocking(read_fd, False)
        return Spawned(popen, cgroup, read_fd)

    def _check_readonly(self, paths: Sequence[str | Path], workspace: Path) -> list[Path]:
        """The read-only paths as absolute paths, each checked to be a file or folder inside the
        workspace reached without a symlink (a link could point the bind at a host path)."""
        if isinstance(paths, (str, Path)):
            raise SandboxError(f"readonly_paths must be a list of paths, got {paths!r}")
        if paths and not self.binds_readonly:
            raise SandboxError(f"the {self.name} sandbox cannot bind paths read-only ({len(paths)} asked for); "
                               "check Sandbox.binds_readonly first and verify those files after the run instead")
        checked: list[Path] = []
        for given in paths:
            path = Path(os.path.abspath(Path(workspace, given)))  # absolute stays; ".." resolved
            if os.path.realpath(path) != str(path) or not path.is_relative_to(workspace) \
                    or not (path.is_file() or path.is_dir()):
                raise SandboxError(f"read-only path {given} is not a file or folder inside the workspace "
                                   f"{workspace} (or the workspace itself, or reached through a link); give "
                                   "paths inside it")
            checked.append(path)
        return checked

    def _popen(
        self, argv: list[str], workspace: Path, limits: Limits, env: dict[str, str],
        readonly: list[Path], pass_fds: tuple[int, ...] = (), **stdio: object,
    ) -> tuple[subprocess.Popen, CommandCgroup | None]:
        # Without read-only paths, wrap is called as before, so a backend written for three arguments works.
        wrapped = self.wrap(argv, workspace, limits, readonly) if readonly else self.wrap(argv, workspace, limits)
        argv_gated = gated(wrapped, env, workspace)  # FileNotFoundError for a missing program, before any cgroup
        cgroup = CommandCgroup.create(limits.max_processes, limits.tree_memory_limit)
        cgroup_fds = cgroup.open_procs_fds() if cgroup is not None else []
        popen = None
        try:
            rlimits = rlimits_for(limits, cgroup)  # before the child exists: RLIMIT_NPROC counts the tasks without it
            popen = subprocess.Popen(argv_gated, cwd=workspace, env=env, start_new_session=True, pass_fds=pass_fds,
                                     **stdio)  # type: ignore[call-overload]
            confine(popen, rlimits, cgroup_fds)
        except BaseException:
            if popen is not None and popen.returncode is None:
                kill_tree(popen, None)
            if cgroup is not None:
                cgroup.remove()
            raise
        finally:
            for fd in cgroup_fds:
                os.close(fd)
        register_command(workspace, popen, cgroup)  # so the workspace's disk watcher can stop it
        return popen, cgroup

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, isolated={self.isolated})"


class Spawned:
    """A command started by ``Sandbox.spawn``: its process, cgroup and the read end of its output pipe."""

    def __init__(self, popen: subprocess.Popen, cgroup: CommandCgroup | None, output_fd: int) -> None:
        self.popen, self.cgroup, self.output_fd = popen, cgroup, output_fd
        self.returncode: int | None = None
        self._closed = False

    @property
    def alive(self) -> bool:
        return not self._closed and self.popen.poll() is None

    def output(self, limit: int = 16_000) -> str:
        """What the command printed so far (at most ``limit`` bytes; never blocks)."""
        chunks = b""
        while len(chunks) < limit:
            try:
                chunk = os.read(self.output_fd, limit - len(chunks))
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            chunks += chunk
        return chunks.decode(errors="replace")

    def close(self) -> int | None:
        """Kill the whole tree, reap it, remove its cgroup. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self.returncode = kill_tree(self.popen, self.cgroup)
            os.close(self.output_fd)
        return self.returncode


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _check_request(argv: Sequence[str], workspace: Path) -> tuple[list[str], Path]:
    if isinstance(argv, str) or not argv:
        raise SandboxError(f"argv must be a non-empty list of strings, got {argv!r}; e.g. ['python', '-V']")
    workspace = Path(workspace).resolve()
    if not workspace.is_dir():
        raise SandboxError(f"workspace {workspace} is not a folder; create it with Workspace.create")
    return [str(part) for part in argv], workspace


def make_raw(fd: int) -> None:
    """No echo, no canonical line editing, no signal characters, no output translation."""
    attrs = termios.tcgetattr(fd)
    attrs[0] &= ~(termios.ICRNL | termios.IXON | termios.INLCR | termios.IGNCR)
    attrs[1] &= ~termios.OPOST
    attrs[3] &= ~(termios.ECHO | termios.ECHONL | termios.ICANON | termios.ISIG | termios.IEXTEN)
    attrs[6][termios.VMIN] = 1
    attrs[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, attrs)


def _pump(popen: subprocess.Popen, stdin_data: bytes, output: BoundedOutput, clock: CommandClock) -> bool:
    """Feed stdin and collect stdout until both EOF and exit, exit plus a short drain, or the clock's
    budget is spent (the command's own time: ``pdbgym.sandbox.cpuwait``).

    Returns True when the budget ran out first. The child's exit is watched through a pidfd, so
    nothing sleeps: every wait is a select on the pipes and the pidfd.
    """
    assert popen.stdout is not None
    selector = selectors.DefaultSelector()
    os.set_blocking(popen.stdout.fileno(), False)
    selector.register(popen.stdout, selectors.EVENT_READ, "out")
    pidfd = os.pidfd_open(popen.pid)
    selector.register(pidfd, selectors.EVENT_READ, "exit")
    if popen.stdin is not None:
        os.set_blocking(popen.stdin.fileno(), False)
        selector.register(popen.stdin, selectors.EVENT_WRITE, "in")
    pending = memoryview(stdin_data)
    exited, output_open, drain_until = False, True, None
    try:
        while output_open or not exited:
            remaining = clock.remaining() if drain_until is None else drain_until - time.monotonic()
            if remaining <= 0:
                return not exited
            for key, _ in selector.select(remaining):
                if key.data == "exit":
                    exited = True
                    selector.unregister(pidfd)
                    drain_until = time.monotonic() + min(_DRAIN_AFTER_EXIT_S, clock.remaining())
                elif key.data == "in":
                    pending = _write_some(popen, selector, pending)
                elif chunk := os.read(popen.stdout.fileno(), READ_CHUNK_BYTES):
                    output.feed(chunk)
                else:  # EOF; a command may close its output and keep working, so wait for its exit
                    output_open = False
                    selector.unregister(popen.stdout)
        return False
    finally:
        selector.close()
        os.close(pidfd)


def _write_some(popen: subprocess.Popen, selector: selectors.BaseSelector, pending: memoryview) -> memoryview:
    assert popen.stdin is not None
    try:
        pending = pending[os.write(popen.stdin.fileno(), pending):]
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        pending = pending[len(pending):]  # the command stopped reading; the rest is not wanted
    if not pending:
        selector.unregister(popen.stdin)
        popen.stdin.close()
    return pending
