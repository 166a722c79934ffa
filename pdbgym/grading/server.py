"""The episode's pytest fork server ("zygote"): a warm interpreter in a long-lived sandbox that forks one
child per test run or pdb session, so no run pays for starting Python and importing pytest.

Started by ``pdbgym.sandbox.zygote.Zygote`` as ``python -I -B .../pdbgym/grading/server.py FD`` inside the
bwrap sandbox (FD: its end of a ``SOCK_SEQPACKET`` control socket). It imports what the hardened runner
imports before any project code (``launch.import_runner``: pytest, its plugins, pytest-timeout, the
report plugin's module), never project code, then serves requests; each request is one JSON message whose
descriptors (``SCM_RIGHTS``) are a reply socket and the job's own descriptors:

- ``{"op": "test", "root", "args", "env"}`` + (reply, output pipe, result channel): the hardened run
  (``launch.prepare`` + ``run``) in a fresh child, exactly as ``python -I -B launch.py``;
- ``{"op": "pdb", "argv", "cwd", "env"}`` + (reply, pty slave): ``launcher.py`` (the pdb session), as
  ``python -P launcher.py --spare ...`` would run it on that terminal;
- ``{"op": "sweep"}`` + (reply): kill every other process of the sandbox and remove what they left in its
  private writable places (``/tmp``, ``/dev/shm``, POSIX and System V IPC, keyrings).

The sweep above is the one bwrap's sandbox gets, asked for with ``--pid-namespace`` after FD and refused
unless the server is the second process of a PID namespace of its own (bwrap's init is the first). Without
it the server serves the plain backend, which has no namespaces: the server is one process among the
host's, so "every other process" is its own descendants (it is their subreaper, so a daemon a job leaves
stays below it), each signalled through a pidfd once its ancestry is checked, and the host's ``/tmp``,
``/dev/shm``, IPC objects and keyrings are not the sandbox's to empty: the sweep leaves them. A slip in the
arguments therefore gives the narrow sweep, never the host-wide one.

A job's reply socket gets ``{"pid": N}`` with the child's pidfd, then ``{"exit": STATUS}`` when it is reaped.

What keeps runs apart (docs/sandbox.md, "The pytest fork server"): the server never runs a job itself and
never imports after it is warm; a child is a copy of that pristine state, so nothing a run does in its own
memory (modules, ``sys.modules``, the working folder, environment, signal handlers, patched pytest
internals) reaches the server or a later child. The server is not dumpable (no ``ptrace``, no
``/proc/<pid>/mem`` or ``fd`` for its children, which share its uid), and each child closes every
descriptor but its job's before anything of the job runs, leaves the server's call stack unwound and gets
a session keyring of its own. Before each fork the server checks that what a child could change of it
from outside (its rlimits, nice value, CPU affinity, scheduling policy) is as it was: if not, it refuses
and exits, and its host falls back to a fresh interpreter.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import importlib
import importlib.util
import os
import platform
import resource
import selectors
import shutil
import signal
import socket
import stat
import sys
import termios
import time
import traceback
import types

if importlib.util.find_spec("pdbgym") is None:  # a source checkout, not installed (as launch does)
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# Import what every run needs before anything else: this is what each child is spared.
from pdbgym.grading import launch  # noqa: E402
from pdbgym.seqpacket import receive_message, send_message  # noqa: E402  (the standard library alone)

launch.import_runner()
# What each run imports anyway before any project code (pytest's debugging plugin at configure time; the pdb
# session's launcher first thing): imported here once instead of in every child.
for _name in ("bdb", "cmd", "code", "codeop", "faulthandler", "pdb", "readline", "_pytest._argcomplete"):
    try:
        importlib.import_module(_name)
    except ImportError:
        pass

# The pdb session's launcher, by path (a script: its package is not in the sandbox's copy of pdbgym).
LAUNCHER = os.path.normpath(os.path.join(os.path.dirname(launch.__file__), "..", "debugger", "launcher.py"))
CHANNEL_FD = 3  # where a test child finds the result channel (its number goes in PDBGYM_RESULT_CHANNEL)
CHANNEL_ENV = "PDBGYM_RESULT_CHANNEL"
WIPED = ("/tmp", "/dev/shm", "/dev/mqueue")  # the sandbox's private writable places, besides the workspace
MAX_FDS = 16  # descriptors taken from one request (a request carries 1 to 3)
_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36
_IPC_RMID = 0
_KEYCTL = {"x86_64": 250, "aarch64": 219}  # keyctl(2) syscall numbers (not in the C library)
_KEYCTL_JOIN_SESSION, _KEYCTL_CLEAR = 1, 7
_KEY_SPEC_USER, _KEY_SPEC_USER_SESSION = -4, -5
_LIBC = ctypes.CDLL(None, use_errno=True)
_SIGNALS = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]
_INITIAL_HANDLERS = {s: signal.getsignal(s) for s in _SIGNALS}  # a fresh interpreter's dispositions
_plain = True  # the plain backend's server, in the host's PID namespace, unless ``main`` is given --pid-namespace


def _attributes() -> dict[str, object]:
    """What another process of the same uid can change in this one from outside, without ptrace."""
    limits = {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")}
    return {"rlimits": limits, "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "affinity": sorted(os.sched_getaffinity(0)), "scheduler": os.sched_getscheduler(0)}


def _keyctl(*args: int) -> int:
    number = _KEYCTL.get(platform.machine())
    if number is None:
        return -1
    return _LIBC.syscall(number, *[ctypes.c_long(a) for a in args])


def _send(sock: socket.socket, message: dict, fds: list[int] = ()) -> None:  # type: ignore[assignment]
    """One message to the host; never blocks the server (a host that stopped reading loses it)."""
    try:
        send_message(sock, message, fds, socket.MSG_DONTWAIT)
    except OSError:
        pass


# ----- the child ------------------------------------------------------------------------------------------


def _become_child(job: dict, fds: list[int]) -> None:
    """Right after the fork: the job's descriptors at 0-3, everything else of the server closed, signals
    as a fresh interpreter has them, its own session and keyring, the job's environment."""
    if job["op"] == "test":
        out, channel = fds
        null = os.open(os.devnull, os.O_RDONLY)
        for source, target in ((null, 0), (out, 1), (out, 2), (channel, CHANNEL_FD)):
            os.dup2(source, target)
    else:
        (terminal,) = fds
        for target in (0, 1, 2):
            os.dup2(terminal, target)
    first = CHANNEL_FD + 1 if job["op"] == "test" else 3
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd") if int(name) >= first):
        try:
            os.close(fd)  # (the listing's own descriptor among them, already closed)
        except OSError:
            pass
    os.setsid()
    if job["op"] == "pdb":
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    for signum, handler in _INITIAL_HANDLERS.items():
        try:
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        except (OSError, ValueError, TypeError):
            pass
    _keyctl(_KEYCTL_JOIN_SESSION, 0)  # an anonymous session keyring of its own, not the server's
    os.environ.clear()
    os.environ.update(job["env"])
    os.chdir(job["cwd"])


def run_test(job: dict) -> None:
    """A hardened run, as ``python -I -B launch.py ROOT ARGS`` (this interpreter's flags): never returns."""
    os.environ[CHANNEL_ENV] = str(CHANNEL_FD)
    root = os.path.abspath(job["root"])
    main = types.ModuleType("__main__")
    main.__file__ = launch.__file__
    sys.modules["__main__"] = main
    sys.argv = [launch.__file__, root, *job["args"]]
    status = 4
    try:
        launch.prepare(root)
        status = launch.run(job["args"])
    except BaseException:  # noqa: BLE001 - reported as a crash, never back into the server loop
        traceback.print_exc()
    launch.flush_and_exit(status)


def run_pdb(job: dict) -> None:
    """``launcher.py`` on the pty, as ``python -P launcher.py --spare FLAGS NODE`` with the job's
    environment runs it (pytest is already imported, so the launcher's spare check applies): never returns."""
    for name in [n for n in sys.modules if n == "pdbgym" or n.startswith("pdbgym.")]:
        del sys.modules[name]  # a cold launcher imports no pdbgym module
    path_entries = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = path_entries  # what -P leaves of sys.path start-up, PYTHONPATH first
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # a terminal, as a fresh interpreter sees it
    main_spec = importlib.util.spec_from_file_location("__main__", LAUNCHER)
    assert main_spec is not None and main_spec.loader is not None
    launcher = importlib.util.module_from_spec(main_spec)
    sys.modules["__main__"] = launcher
    sys.argv = [LAUNCHER, *job["argv"]]
    try:
        main_spec.loader.exec_module(launcher)
        # -I ignores PYTHONBREAKPOINT: what that variable asks for (the session's own debugger), set directly
        sys.breakpointhook = launcher.breakpoint_hook
        launcher.main()
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    os._exit(1)


# ----- the sweep ---------------------------------------------------------------------------------------------


def _other_pids() -> list[int]:
    """Every other process of the sandbox: in bwrap's PID namespace all but its init and this server; in the
    plain backend this server's descendants."""
    me = os.getpid()
    if _plain:
        return _descendants(me)
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]


def _children(pid: int) -> list[int] | None:
    """``pid``'s children from ``/proc/PID/task/*/children``; None where the kernel has no such file."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as listing:
                found += [int(child) for child in listing.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None  # a kernel without CONFIG_PROC_CHILDREN
        except OSError:
            continue
    return found


def _descendants(root: int) -> list[int]:
    """Every process below ``root``, read from the children lists (or, where the kernel has none, from every
    process's parent in ``/proc``)."""
    found: list[int] = []
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        children = _children(pid)
        if children is None:
            return _descendants_by_scan(root)
        for child in children:
            if child not in found:
                found.append(child)
                frontier.append(child)
    return found


def _descendants_by_scan(root: int) -> list[int]:
    parents = {int(p): _parent(int(p)) for p in os.listdir("/proc") if p.isdigit()}
    below, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in below and pid not in below}
        below |= more
        grew = bool(more)
    return sorted(below - {root})


def _stat(pid: int) -> tuple[int, int] | None:
    """``pid``'s parent and start time (clock ticks after boot), from ``/proc/PID/stat``."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def _is_below_me(pid: int) -> bool:
    """Whether ``pid`` is now a descendant of this server: its parent chain reaches it, each parent started
    no later than its child (a parent's pid reused meanwhile by a younger process fails that)."""
    me, seen = os.getpid(), set()
    entry = _stat(pid)
    while entry is not None and pid not in seen and len(seen) < 4096:
        seen.add(pid)
        parent, started = entry
        if parent <= 1:
            return False
        if parent == me:
            return True
        entry = _stat(parent)
        if entry is None or entry[1] > started:
            return False
        pid = parent
    return False


def _kill(pid: int) -> bool:
    """SIGKILL ``pid``. In the plain backend through a pidfd, and only once the process behind it is seen to
    be this server's descendant: a pid read a moment ago may since name another process of the host."""
    if not _plain:
        os.kill(pid, signal.SIGKILL)
        return True
    pidfd = os.pidfd_open(pid)
    try:
        if not _is_below_me(pid):
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return True
    finally:
        os.close(pidfd)


def _reap_any() -> list[tuple[int, int]]:
    reaped = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append((pid, os.waitstatus_to_exitcode(status)))


def _kill_all_others(deadline_s: float = 5.0) -> int:
    killed: set[int] = set()
    deadline = time.monotonic() + deadline_s
    while (others := _other_pids()) and time.monotonic() < deadline:
        for pid in others:
            try:
                if _kill(pid):
                    killed.add(pid)
            except OSError:  # gone, or not ours to signal: the leftovers list names what stays
                pass
        _reap_any()
        time.sleep(0.002)
    return len(killed)


def _mount_points() -> set[str]:
    try:
        lines = open("/proc/self/mountinfo").read().splitlines()
    except OSError:
        return set()
    return {line.split()[4].replace("\\040", " ") for line in lines if len(line.split()) > 4}


def _pristine_entries() -> set[str]:
    """What the sandbox put in its private writable places: the folders leading to a bind (a workspace
    under /tmp) and the binds themselves, never what is inside a bind."""
    mounts, found = _mount_points(), set()
    for folder in WIPED:
        for dirpath, dirnames, filenames in os.walk(folder):
            found.update(os.path.join(dirpath, name) for name in dirnames + filenames)
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in mounts]
    return found


def _wipe(folder: str, kept: set[str], mounts: set[str]) -> int:
    """Remove everything under ``folder`` the sandbox did not start with (never entering a bind)."""
    removed = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        if entry.path in kept:
            if entry.path not in mounts and entry.is_dir(follow_symlinks=False):
                try:
                    os.chmod(entry.path, 0o755)
                except OSError:
                    pass
                removed += _wipe(entry.path, kept, mounts)
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)
                for dirpath, dirnames, _ in os.walk(entry.path):  # folders made unreadable or unwritable
                    for name in dirnames:
                        if not os.path.islink(os.path.join(dirpath, name)):
                            os.chmod(os.path.join(dirpath, name), 0o700)
                    dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed += 1
        except OSError:
            pass
    return removed


def _remove_sysv_ipc() -> int:
    removed = 0
    for kind, remove in (("shm", lambda i: _LIBC.shmctl(i, _IPC_RMID, None)),
                         ("sem", lambda i: _LIBC.semctl(i, 0, _IPC_RMID)),
                         ("msg", lambda i: _LIBC.msgctl(i, _IPC_RMID, None))):
        try:
            lines = open(f"/proc/sysvipc/{kind}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            if line.split() and remove(int(line.split()[1])) == 0:
                removed += 1
    return removed


def _leftovers(kept: set[str]) -> list[str]:
    found = [f"process {pid}" for pid in _other_pids()]
    found += sorted(set(_pristine_entries()) - kept)
    found += [f"{path} (gone)" for path in sorted(kept) if not os.path.lexists(path)]
    for kind in ("shm", "sem", "msg"):
        try:
            found += [f"System V {kind} {line.split()[1]}" for line in open(f"/proc/sysvipc/{kind}").read().splitlines()[1:]
                      if line.split()]
        except OSError:
            pass
    return found


def sweep(expected: dict[str, object], kept: set[str]) -> dict[str, object]:
    """Kill every other process, remove what they left, and say whether this server is as it started."""
    killed = _kill_all_others()
    if _plain:  # the host's /tmp, IPC and keyrings are not this sandbox's
        problems = [f"process {pid}" for pid in _other_pids()]
        if _attributes() != expected:
            problems.append("the server's rlimits, priority, affinity or scheduling were changed from outside")
        return {"ok": not problems, "killed": killed, "removed": 0, "problems": problems[:20]}
    mounts = _mount_points()
    removed = sum(_wipe(folder, kept, mounts) for folder in WIPED) + _remove_sysv_ipc()
    keyrings = all(_keyctl(_KEYCTL_CLEAR, spec) == 0 for spec in (_KEY_SPEC_USER, _KEY_SPEC_USER_SESSION))
    problems = _leftovers(kept)
    if not keyrings:
        problems.append("the user keyrings could not be cleared")
    if _attributes() != expected:
        problems.append("the server's rlimits, priority, affinity or scheduling were changed from outside")
    return {"ok": not problems, "killed": killed, "removed": removed, "problems": problems[:20]}


# ----- the server --------------------------------------------------------------------------------------------


def _parent(pid: int) -> int | None:
    entry = _stat(pid)
    return None if entry is None else entry[0]


def _kill_orphans(jobs: dict[int, tuple[socket.socket, int]]) -> None:
    """Processes a finished job left behind come back to this server (a child subreaper); they end now,
    with everything below them, as everything a command started ends with its sandbox. (A process a live
    job started and disowned twice ends here too, earlier than it would have.)"""
    me = os.getpid()
    parents = {pid: _parent(pid) for pid in _other_pids()}
    doomed = {pid for pid, parent in parents.items() if parent == me and pid not in jobs}
    while True:
        below = {pid for pid, parent in parents.items() if parent in doomed and pid not in doomed}
        if not below:
            break
        doomed |= below
    for pid in doomed:
        try:
            _kill(pid)
        except OSError:
            pass


def _reap_orphans(jobs: dict[int, tuple[socket.socket, int]]) -> None:
    """Reap the orphans this server inherited (never a live job's child: those are reaped by pid)."""
    me = os.getpid()
    for pid in _other_pids():
        if pid not in jobs and _parent(pid) == me:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def serve(control: socket.socket) -> tuple[dict, list[int]] | None:
    """The server loop. Returns only in a forked child, with the job it is to run (the server's frames are
    gone from the child's stack by then); in the server it returns None when the host closes the socket."""
    expected, kept = _attributes(), set() if _plain else _pristine_entries()
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, None)
    jobs: dict[int, tuple[socket.socket, int]] = {}  # pid -> (reply socket, pidfd)
    _send(control, {"ready": True, "pid": os.getpid(), "plain": _plain})
    while True:
        _reap_orphans(jobs)
        for key, _ in selector.select(1.0):
            if key.data is not None:  # a job's pidfd: the child ended
                pid = key.data
                reply, pidfd = jobs.pop(pid)
                selector.unregister(pidfd)
                os.close(pidfd)
                try:
                    _, status = os.waitpid(pid, 0)
                    code = os.waitstatus_to_exitcode(status)
                except ChildProcessError:
                    code = None
                _kill_orphans(jobs)
                _send(reply, {"exit": code})
                reply.close()
                continue
            job, fds = receive_message(control, MAX_FDS)  # a packet that is not a JSON object: {}, no request
            if job is None:
                if _plain:  # no namespace ends with this server: what its jobs started must end here
                    _kill_all_others()
                return None
            if not fds:
                continue  # no reply socket to answer on
            reply = socket.socket(fileno=fds[0])
            if job.get("op") not in ("test", "pdb", "sweep") or len(fds) != {"test": 3, "pdb": 2}.get(job["op"], 1):
                for fd in fds[1:]:
                    os.close(fd)
                _send(reply, {"error": f"not a request: {str(job)[:80]}"})
                reply.close()
                continue
            if job.get("op") == "sweep":
                _send(reply, sweep(expected, kept))
                reply.close()
                continue
            if _attributes() != expected:
                _send(reply, {"error": "the server was changed from outside (rlimits, priority or affinity)"})
                sys.exit(3)
            sys.stdout.flush()
            sys.stderr.flush()
            # Everything the server holds moves to the collector's permanent generation: a child's
            # collections then never walk (and so never copy) the server's pages of pytest's objects. What a
            # child can tell: gc.get_objects() and gc.get_referrers() leave those objects out.
            gc.freeze()
            try:
                pid = os.fork()
            except OSError as exc:  # the sandbox's process limit, say
                for fd in fds[1:]:
                    os.close(fd)
                _send(reply, {"error": f"fork failed: {exc}"})
                reply.close()
                continue
            if pid == 0:
                # The server's sockets are detached, not closed through their objects: a later collection
                # of one must not close whatever descriptor the job opened at that number.
                try:
                    selector.close()
                    for other_reply, _ in jobs.values():
                        other_reply.detach()
                    reply.detach()
                    control.detach()
                    _become_child(job, fds[1:])
                except BaseException:  # noqa: BLE001 - never back into the server loop
                    os._exit(125)
                return job, fds
            for fd in fds[1:]:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            jobs[pid] = (reply, pidfd)
            selector.register(pidfd, selectors.EVENT_READ, pid)
            _send(reply, {"pid": pid}, [pidfd])


def main() -> None:
    _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)  # no ptrace, /proc/<pid>/mem or fd/ for processes of our uid
    _LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _keyctl(_KEYCTL_JOIN_SESSION, 0)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_IGN)  # only the host ends the server (SIGKILL, or closing the socket)
    global _plain
    _plain = sys.argv[2:] != ["--pid-namespace"]
    if not _plain and not (os.getpid() == 2 and os.getppid() == 1):
        raise SystemExit(f"zygote: --pid-namespace, but this is process {os.getpid()} of parent {os.getppid()}, "
                         "not the second of a PID namespace of its own: refusing to sweep it")
    control = socket.socket(fileno=int(sys.argv[1]))
    if not stat.S_ISSOCK(os.fstat(control.fileno()).st_mode):
        raise SystemExit("zygote: the control descriptor is not a socket")
    job = serve(control)
    if job is None:
        os._exit(0)
    # In a forked child, with the server's loop unwound: become the job.
    run_test(job[0]) if job[0]["op"] == "test" else run_pdb(job[0])


if __name__ == "__main__":
    main()
