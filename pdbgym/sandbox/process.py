"""Starting a confined child (rlimits, cgroup, new session; behind a gate, without fork()) and ending its
whole process tree."""

from __future__ import annotations

import errno
import os
import resource
import shutil
import signal
import subprocess
import threading
from pathlib import Path

from pdbgym.errors import SandboxError
from pdbgym.sandbox.cgroup import CommandCgroup
from pdbgym.sandbox.limits import Limits


def count_tasks_of_uid(uid: int) -> int:
    """Tasks (processes and threads) the kernel charges to ``uid`` for RLIMIT_NPROC."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                total += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    return total


def rlimits_for(limits: Limits, cgroup: CommandCgroup | None) -> list[tuple[int, int]]:
    """(resource, value) pairs applied to the child as both its soft and its hard limit (``confine``)."""
    pairs = [
        (resource.RLIMIT_CPU, int(limits.cpu_time_s)),
        (resource.RLIMIT_AS, int(limits.memory_bytes)),
        (resource.RLIMIT_FSIZE, int(limits.file_size_bytes)),
        (resource.RLIMIT_CORE, 0),
    ]
    if (cgroup is None or not cgroup.bounds_pids) and os.getuid() != 0:
        pairs.append((resource.RLIMIT_NPROC, count_tasks_of_uid(os.getuid()) + limits.max_processes))
    return pairs


# The gate every confined command starts behind: a shell that stops itself, and once continued execs the
# command. Confining a process needs code in the child before exec; a ``preexec_fn`` would do it, but it
# makes ``subprocess`` fork() the whole parent while holding the GIL (its page tables copied: milliseconds
# for a trainer holding gigabytes, every thread stalled meanwhile), where without one it uses vfork() and
# lets go of the GIL. So the parent confines the stopped gate from outside (``confine``) and continues it.
GATE = 'kill -STOP $$ && exec "$@"'
GATE_NAME = "pdbgym-gate"


def gated(argv: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """``argv`` behind the gate. The program is looked up first (on ``env``'s PATH, or from ``cwd`` when
    it names a path, as subprocess would), so a missing one still raises ``FileNotFoundError`` here
    rather than failing in the gate."""
    program = argv[0]
    if os.sep in program:
        path = os.path.join(cwd, program)
        found = path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return ["/bin/sh", "-c", GATE, GATE_NAME, *argv]


def confine(popen: subprocess.Popen, rlimits: list[tuple[int, int]], cgroup_fds: list[int]) -> None:
    """Wait for the gated child to stop, move it into the cgroups, lower its limits (each capped at the
    hard limit it inherited), then continue it into the command. Nothing of the command runs before."""
    pid, status = os.waitpid(popen.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):  # the gate ended without stopping: report its exit, never continue it
        popen.returncode = os.waitstatus_to_exitcode(status)
        raise SandboxError(f"the sandbox gate (/bin/sh) exited with {popen.returncode} before the command "
                           "started; check that /bin/sh is a POSIX shell")
    for fd in cgroup_fds:
        os.write(fd, str(pid).encode())
    for which, value in rlimits:
        _, hard = resource.getrlimit(which)  # the child's own: it inherited this process's limits
        capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.prlimit(pid, which, (capped, capped))
    os.kill(pid, signal.SIGCONT)


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid``, parents before children (via /proc/<pid>/task/*/children)."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in map(int, children):
                found.append(child)
                frontier.append(child)
    return found


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def kill_tree(popen: subprocess.Popen, cgroup: CommandCgroup | None) -> int | None:
    """SIGKILL the child, its process group, every descendant and every cgroup member; reap the child.

    Returns the child's return code. Under bubblewrap killing the outer process is enough (the PID
    namespace dies with its init, which has --die-with-parent); the other sweeps cover the plain
    backend, where a process may have left the group with setsid.
    """
    stragglers = descendants(popen.pid) if popen.poll() is None else []
    for kill in (lambda: os.killpg(popen.pid, signal.SIGKILL), lambda: popen.kill()):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass
    for pid in stragglers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if cgroup is not None:
        cgroup.kill_all()
    returncode = popen.wait()
    if cgroup is not None:
        cgroup.remove()
    return returncode


# Every command started by this process, with its workspace, so that something outside the command's own
# call (the workspace's disk watcher) can stop all commands writing to one workspace. Entries whose
# process was reaped are dropped as new ones come.
_running: list[tuple[Path, subprocess.Popen, CommandCgroup | None]] = []
_running_lock = threading.Lock()


def register_command(workspace: Path, popen: subprocess.Popen, cgroup: CommandCgroup | None) -> None:
    with _running_lock:
        _running[:] = [entry for entry in _running if entry[1].returncode is None]
        _running.append((Path(workspace).resolve(), popen, cgroup))


def unregister_command(workspace: Path, popen: subprocess.Popen) -> None:
    """Forget that ``popen`` runs in ``workspace`` (a long-lived command moving on to another workspace)."""
    workspace = Path(workspace).resolve()
    with _running_lock:
        _running[:] = [entry for entry in _running if not (entry[0] == workspace and entry[1] is popen)]


def kill_commands_in(workspace: Path) -> int:
    """SIGKILL the process tree of every running command started in ``workspace`` or a folder inside it;
    return how many.

    The commands' owners reap them and remove their cgroups as usual (a pdb session sees its process
    end and restarts it; a test run returns killed)."""
    workspace = Path(workspace).resolve()
    with _running_lock:
        mine = [(popen, cgroup) for path, popen, cgroup in _running
                if path.is_relative_to(workspace) and popen.returncode is None]
    killed = 0
    for popen, cgroup in mine:
        if popen.poll() is not None:  # not reaped before this check, so its pid is still its own
            continue
        stragglers = descendants(popen.pid)
        for pid in [popen.pid, *stragglers]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if cgroup is not None:
            cgroup.kill_all()
        killed += 1
    return killed
