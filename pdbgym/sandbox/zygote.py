"""The host side of a pytest fork server ("zygote"): one long-lived sandbox whose warm interpreter forks a
process per test run or pdb session (the server itself is ``pdbgym.grading.server``).

Starting Python and importing pytest is most of a small test run, and an episode makes several (the pdb
session and its restarts, the agent's ``run_tests``). A ``Zygote`` pays that once: ``Sandbox.spawn``
starts the server in a sandbox whose writable folder is ``folder`` (an episode's workspace is made inside
it); each job is one ``fork`` of the server. ``sweep`` asks the server to kill every other process of the
sandbox and remove what they left, before grading reads the workspace and between episodes. Grading never
runs here: it runs in a fresh sandbox the episode never touched.

Under bwrap the server's defences rest on the sandbox's own PID namespace, its private ``/tmp`` and
read-only binds (docs/sandbox.md, "The pytest fork server"). The plain backend has none of these, and
isolates nothing a fresh interpreter would not share either: its server (started without
``--pid-namespace``) sweeps only its own descendants and leaves the host's ``/tmp`` and IPC alone. Any
failure here raises ``ZygoteError``, and callers fall back to starting a fresh interpreter as before.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypedDict, TypeVar, cast

from pdbgym.errors import SandboxError
from pdbgym.fdwait import readable
from pdbgym.sandbox.base import Sandbox, make_raw
from pdbgym.sandbox.cpuwait import CommandClock
from pdbgym.sandbox.environment import sandbox_env
from pdbgym.sandbox.limits import Limits, RunResult
from pdbgym.sandbox.output import BoundedOutput
from pdbgym.sandbox.process import register_command, unregister_command
from pdbgym.sandbox.pty_process import READ_CHUNK_BYTES, PtyTerminal
from pdbgym.sandbox.workspace import owned_folder
from pdbgym.seqpacket import receive_message, send_message

READY_TIMEOUT_S = 60.0  # the server's start: an interpreter importing pytest, on a loaded machine
ANSWER_TIMEOUT_S = 10.0  # a request's answer (a fork, a sweep)
EXIT_REPORT_GRACE_S = 2.0  # a job's process is gone: its exit status must follow by then
DRAIN_AFTER_EXIT_S = 0.2  # as Sandbox.run: output a background process keeps open must not hold the caller
MAX_FDS = 4  # descriptors taken from one answer (a started job's pidfd)
T = TypeVar("T")


class ZygoteError(SandboxError):
    """The fork server could not do what was asked (not started, gone, changed, or silent); the caller
    starts a fresh interpreter instead."""


class TestRequest(TypedDict):
    """The hardened run (``launch.py ROOT ARGS``), sent with the output pipe and the result channel."""

    op: Literal["test"]
    root: str
    args: list[str]
    env: dict[str, str]
    cwd: str


class PdbRequest(TypedDict):
    """The pdb session (``launcher.py ARGV``), sent with the pty's slave end."""

    op: Literal["pdb"]
    argv: list[str]
    cwd: str
    env: dict[str, str]


class SweepRequest(TypedDict):
    op: Literal["sweep"]


Request = TestRequest | PdbRequest | SweepRequest


class SweepAccount(TypedDict):
    """The server's answer to a sweep: ``ok`` when nothing was left over; processes killed, entries removed,
    and what could not be made clean (at most 20 lines)."""

    ok: bool
    killed: int
    removed: int
    problems: list[str]


class _SpawnerThread:
    """The thread every server is started from. bwrap's ``--die-with-parent`` is the parent-death signal,
    which fires when the *thread* that started it ends: a server started from a worker thread (an episode
    stepped through ``asyncio.to_thread``) would be killed when that thread retires. This one lives as long
    as the process (one per process: a forked child starts its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner = -1
        self._requests: queue.Queue[tuple[Callable[[], object], queue.Queue[tuple[bool, object]]]] = queue.Queue()

    def call(self, work: Callable[[], T]) -> T:
        with self._lock:
            if self._owner != os.getpid():
                self._owner = os.getpid()
                self._requests = queue.Queue()
                threading.Thread(target=self._serve, args=(self._requests,), name="pdbgym-zygote-spawner",
                                 daemon=True).start()
            answer: queue.Queue[tuple[bool, object]] = queue.Queue(maxsize=1)
            self._requests.put((work, answer))
        ok, value = answer.get()
        if not ok:
            raise cast(BaseException, value)
        return cast(T, value)  # what ``work`` returned

    @staticmethod
    def _serve(requests: queue.Queue[tuple[Callable[[], object], queue.Queue[tuple[bool, object]]]]) -> None:
        while True:
            work, answer = requests.get()
            try:
                answer.put((True, work()))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                answer.put((False, exc))


_spawner = _SpawnerThread()


def _receive(sock: socket.socket, timeout_s: float) -> tuple[dict[str, object] | None, list[int]]:
    """One message and the descriptors it carries; (None, []) at EOF, {} for a packet that is not a JSON
    object. Raises ZygoteError on timeout."""
    if not readable([sock], max(timeout_s, 0.0)):
        raise ZygoteError(f"the pytest fork server did not answer within {timeout_s:g} s")
    try:
        return receive_message(sock, MAX_FDS)
    except OSError as exc:
        raise ZygoteError(f"the pytest fork server's socket failed: {exc}") from exc


def _host_pid(pidfd: int) -> int:
    """The pid, in this process's PID namespace, of the process a pidfd refers to."""
    for line in Path(f"/proc/self/fdinfo/{pidfd}").read_text().splitlines():
        if line.startswith("Pid:"):
            return int(line.split()[1])
    raise ZygoteError("the pidfd the fork server sent names no process")


class _Job:
    """One forked child of the server: its reply socket (the exit status comes there) and its pidfd."""

    def __init__(self, reply: socket.socket, pidfd: int) -> None:
        self.reply, self.pidfd = reply, pidfd
        self.pid = _host_pid(pidfd)
        self.exit_code: int | None = None
        self.reported = False  # the server sent the exit status
        self.server_gone = False  # the reply socket closed without it

    @property
    def exited(self) -> bool:
        """Whether the process is gone (from its pidfd; the status may not have been reported yet)."""
        return bool(readable([self.pidfd], 0))

    def take_report(self, timeout_s: float) -> bool:
        """Read the exit report if one comes within ``timeout_s``; True once it (or the server's end) is in."""
        if self.reported or self.server_gone:
            return True
        if not readable([self.reply], max(timeout_s, 0.0)):
            return False
        try:
            message, fds = _receive(self.reply, 0)
        except ZygoteError:
            message, fds = None, []
        for fd in fds:
            os.close(fd)
        if message is None or "exit" not in message:
            self.server_gone = True
        else:
            code = message["exit"]  # the server's waitstatus of the job, as an exit code
            self.exit_code, self.reported = (code if isinstance(code, int) else None), True
        return True

    def kill(self) -> None:
        """SIGKILL the child now, through its pidfd (never a pid the server may have reaped and the kernel
        reused). The server reaps it, reports, and ends what it left behind."""
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def finish(self) -> int | None:
        """Kill, wait for the report, release the descriptors; the exit status (None: not reported)."""
        self.kill()
        deadline = time.monotonic() + EXIT_REPORT_GRACE_S
        while not self.take_report(deadline - time.monotonic()) and time.monotonic() < deadline:
            pass
        self.reply.close()
        os.close(self.pidfd)
        return self.exit_code


class ZygotePty(PtyTerminal):
    """A pdb job of the fork server on a raw pty: what ``PdbSession`` uses of a ``PtyProcess``. The job's
    own process runs the launcher (no wrapper around it), so it is the one to interrupt."""

    def __init__(self, job: _Job, master_fd: int) -> None:
        self.job, self.master_fd = job, master_fd
        self.returncode: int | None = None
        self._closed = False

    @property
    def pid(self) -> int:
        return self.job.pid

    @property
    def alive(self) -> bool:
        return not self._closed and not self.job.exited

    def find_process(self, marker: str) -> int | None:
        return None if self.job.exited else self.pid

    def signal_process(self, pid: int, signum: int = signal.SIGINT) -> bool:
        """The job's own process is signalled through its pidfd: once the server has reaped it, its pid may
        name another process (in the plain backend, any of the host's)."""
        if pid != self.pid:
            return super().signal_process(pid, signum)
        try:
            signal.pidfd_send_signal(self.job.pidfd, signum)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        if not self._closed:
            self.job.kill()

    def close(self) -> int | None:
        if self._closed:
            return self.returncode
        self._closed = True
        self.returncode = self.job.finish()
        os.close(self.master_fd)
        return self.returncode

    def __enter__(self) -> ZygotePty:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Zygote:
    """A pytest fork server in its own sandbox (bwrap, or the plain backend); ``folder`` is writable inside it."""

    def __init__(self, sandbox: Sandbox, server_argv: list[str], limits: Limits | None = None,
                 parent: Path | None = None) -> None:
        if sandbox.isolated and not sandbox.binds_readonly:
            raise ZygoteError(f"the pytest fork server needs read-only binds or no isolation, not {sandbox.name}")
        # bwrap's server sweeps its whole PID namespace; the plain one only its own descendants
        self.plain = not sandbox.isolated
        mode = [] if self.plain else ["--pid-namespace"]
        self.sandbox = sandbox
        self.folder = owned_folder("", parent)  # named like a workspace: an episode's copy is folder/w
        host_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._control = host_end
        self._lock = threading.Lock()
        self._workspace: Path | None = None
        self.jobs_run = 0
        try:
            self._command = _spawner.call(lambda: sandbox.spawn(
                [*server_argv, str(server_end.fileno()), *mode], self.folder, limits or Limits(),
                env=sandbox_env(self.folder), pass_fds=(server_end.fileno(),)))
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            host_end.close()
            raise
        finally:
            server_end.detach()  # spawn closed it once the server had it
        self._ready = False

    # ----- life ---------------------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return self._command.alive

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Block until the server has imported what each run needs; ZygoteError (and closed) if it fails."""
        if self._ready:
            return
        try:
            message, fds = _receive(self._control, timeout_s)
            for fd in fds:
                os.close(fd)
            if not message or not message.get("ready"):
                raise ZygoteError("the pytest fork server ended before it was ready")
            if message.get("plain") is not self.plain:
                sweeps = "its descendants" if message.get("plain") else "its PID namespace"
                raise ZygoteError(f"the pytest fork server sweeps {sweeps}, not what the {self.sandbox.name} "
                                  "sandbox needs")
        except ZygoteError as exc:
            output = self._command.output()
            self.close()
            raise ZygoteError(f"{exc}; its output: {output.strip()[-2000:] or '(none)'}") from exc
        self._ready = True

    def stop(self) -> None:
        """End the server and everything it started (its folder, holding the workspace, stays). Twice is fine."""
        self.release_workspace()
        self._command.close()  # while the server lives, so its tree can still be found below it
        self._control.close()

    def close(self) -> None:
        """``stop``, then remove the folder. Safe to call twice."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def serve_workspace(self, workspace: Path) -> None:
        """``workspace`` (inside ``folder``) is the episode's now: a disk watcher stopping the commands in it
        (``kill_commands_in``) ends this whole sandbox."""
        self.release_workspace()
        self._workspace = Path(workspace).resolve()
        register_command(self._workspace, self._command.popen, self._command.cgroup)

    def release_workspace(self) -> None:
        if self._workspace is not None:
            unregister_command(self._workspace, self._command.popen)
            self._workspace = None

    # ----- requests -----------------------------------------------------------------------------------------

    def _request(self, request: Request, fds: list[int]) -> socket.socket:
        """Send ``request`` with a fresh reply socket and ``fds`` (closed here, sent or not)."""
        reply_host, reply_server = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            if not self._ready or not self.alive:
                raise ZygoteError("the pytest fork server is not running")
            with self._lock:
                self._control.settimeout(ANSWER_TIMEOUT_S)
                send_message(self._control, request, [reply_server.fileno(), *fds])
        except (OSError, ZygoteError) as exc:
            reply_host.close()
            raise ZygoteError(f"the pytest fork server cannot take a request: {exc}") from exc
        finally:
            reply_server.close()
            for fd in fds:
                os.close(fd)
        return reply_host

    def _answer(self, reply: socket.socket) -> tuple[dict[str, object] | None, list[int]]:
        """The first answer on ``reply``; a server silent past ``ANSWER_TIMEOUT_S`` (stopped by a signal, say)
        is stopped for good, so every later request fails at once."""
        try:
            return _receive(reply, ANSWER_TIMEOUT_S)
        except ZygoteError:
            reply.close()
            self.stop()
            raise

    def _start(self, request: TestRequest | PdbRequest, fds: list[int]) -> _Job:
        reply = self._request(request, fds)
        message, received = self._answer(reply)
        if message is None or "pid" not in message or len(received) != 1:
            for fd in received:
                os.close(fd)
            reply.close()
            why = (message or {}).get("error", "it ended")
            raise ZygoteError(f"the pytest fork server did not start the job: {why}")
        self.jobs_run += 1
        return _Job(reply, received[0])

    def run_test(self, root: Path, args: list[str], env: dict[str, str], channel_fd: int,
                 limits: Limits) -> RunResult:
        """The hardened run (``launch.py ROOT ARGS``) in ``root`` as a forked child, with ``env``
        and the result channel's write end ``channel_fd`` (closed here); bounded like ``Sandbox.run``.
        Raises ZygoteError when the server could not run it or never reported how it ended."""
        started = time.monotonic()
        out_read, out_write = os.pipe()
        try:
            job = self._start({"op": "test", "root": str(root), "args": args, "env": env, "cwd": str(root)},
                              [out_write, channel_fd])
        except ZygoteError:
            os.close(out_read)
            raise
        output = BoundedOutput(limits.output_limit_bytes)
        timed_out = _pump(out_read, job, output, CommandClock(job.pid, limits.wall_time_s))
        returncode = job.finish()
        if not job.reported:  # stopped, ended, or made to hang by something of the run: never used again
            self.stop()
            raise ZygoteError("the pytest fork server did not report how the run ended")
        return RunResult(argv=["launch.py", str(root), *args], returncode=returncode, output=output.text(),
                         timed_out=timed_out, duration_s=time.monotonic() - started,
                         bytes_total=output.bytes_total, truncated=output.truncated)

    def spawn_pty(self, argv: list[str], cwd: Path, env: dict[str, str]) -> ZygotePty:
        """``launcher.py ARGV`` (the pdb session) as a forked child on a new raw pty."""
        master_fd, slave_fd = os.openpty()
        make_raw(slave_fd)
        try:
            job = self._start({"op": "pdb", "argv": argv, "cwd": str(cwd), "env": env}, [slave_fd])
        except ZygoteError:
            os.close(master_fd)
            raise
        return ZygotePty(job, master_fd)

    def sweep(self) -> SweepAccount:
        """Kill every process of the sandbox but the server and remove what they left in its private
        writable places; returns the server's account (``ok``, ``killed``, ``removed``, ``problems``)."""
        reply = self._request({"op": "sweep"}, [])
        message, fds = self._answer(reply)
        reply.close()
        for fd in fds:
            os.close(fd)
        if message is None or "ok" not in message:
            raise ZygoteError("the pytest fork server ended during a sweep")
        return cast(SweepAccount, message)  # the server's own answer (grading/server.py's ``sweep``)


def _pump(out_fd: int, job: _Job, output: BoundedOutput, clock: CommandClock) -> bool:
    """Collect the job's output until its exit is reported and its output closed (or a short drain after
    the report), or the clock's budget is spent (the job's own time: ``pdbgym.sandbox.cpuwait``); True
    when the budget ran out first (``finish`` then kills the job). A job whose process is gone with no
    report within ``EXIT_REPORT_GRACE_S`` ends the wait too."""
    os.set_blocking(out_fd, False)
    output_open, drain_until, gone_at = True, None, None
    try:
        while True:
            now = time.monotonic()
            ended = job.reported or job.server_gone
            if ended:
                drain_until = drain_until or now + DRAIN_AFTER_EXIT_S
                if not output_open or now >= drain_until:
                    return False
            elif (left := clock.remaining()) <= 0:
                return True
            elif gone_at is not None and now >= gone_at + EXIT_REPORT_GRACE_S:
                return False  # the process is gone and the server is silent: run_test refuses the run
            watched: list[int | socket.socket] = [out_fd] if output_open else []
            if not ended:
                watched.append(job.reply)
                if gone_at is None:
                    watched.append(job.pidfd)
            if ended:
                wait = drain_until - now
            else:
                wait = left if gone_at is None else min(left, gone_at + EXIT_REPORT_GRACE_S - now)
            ready = readable(watched, max(0.0, wait))
            if job.pidfd in ready:
                gone_at = time.monotonic()
            if job.reply in ready:
                job.take_report(0)
            if out_fd in ready:
                try:
                    chunk = os.read(out_fd, READ_CHUNK_BYTES)
                except BlockingIOError:
                    continue
                if chunk:
                    output.feed(chunk)
                else:
                    output_open = False
    finally:
        os.close(out_fd)
