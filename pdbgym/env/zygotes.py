"""The process's pytest fork servers (``pdbgym.sandbox.zygote``), one per live episode, kept between episodes.

An episode takes a server at ``reset`` (``acquire``) and gives it back when it closes (``release``). One
that comes back is swept (every process it started killed, its private ``/tmp``, ``/dev/shm``, message
queues, System V IPC and keyrings emptied, the server checked unchanged) and its folder emptied on the
host; only then does the next episode get it, so the start of Python and pytest is paid once per process
and concurrent episode, not once per run. A server that cannot be swept clean, or has died, is ended
instead. The bwrap sandbox and the plain backend get one (the plain one sweeps only its own descendants:
``pdbgym.grading.server``); another backend gets None, and its episode starts a fresh interpreter per run.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import threading
from pathlib import Path

from pdbgym.errors import SandboxError
from pdbgym.grading.testrun import ZYGOTE_SERVER
from pdbgym.sandbox import Sandbox
from pdbgym.sandbox.zygote import Zygote, ZygoteError

logger = logging.getLogger(__name__)
MAX_IDLE = 16  # servers kept waiting for an episode (each an idle interpreter holding pytest: ~35 MB)

_idle: dict[str, list[Zygote]] = {}
_lock = threading.Lock()
_owner = os.getpid()
_warned: set[str] = set()


def server_argv() -> list[str]:
    """How the server starts: this interpreter, isolated, no bytecode written (as the grading launcher)."""
    return [sys.executable, "-I", "-B", ZYGOTE_SERVER]


def _key(sandbox: Sandbox, parent: Path | None) -> str:
    """Servers wait by backend, folder and the environment mounted in them: an episode gets a server of its
    own sandbox's kind whose interpreter sees its task's packages, never another task's."""
    folder = str(Path(parent).resolve()) if parent is not None else ""
    return f"{sandbox.name}\0{folder}\0{sandbox.site_packages or ''}"


def _fresh_after_fork() -> None:
    """A forked process (a pool worker) never uses its parent's servers: their sockets are the parent's."""
    global _owner
    if os.getpid() != _owner:
        _idle.clear()
        _owner = os.getpid()


def acquire(sandbox: Sandbox, parent: Path | None = None) -> Zygote | None:
    """A swept, ready server whose folder lies under ``parent`` (None: the temp folder), started if none
    waits; None where the sandbox cannot hold one or it fails to start (said once, then quietly)."""
    if sandbox.isolated and not sandbox.binds_readonly:
        return None
    key = _key(sandbox, parent)
    with _lock:
        _fresh_after_fork()
        waiting = _idle.get(key, [])
        while waiting:
            zygote = waiting.pop()
            if zygote.alive:
                return zygote
            zygote.close()
    try:
        zygote = Zygote(sandbox, server_argv(), parent=parent)
        zygote.wait_ready()
    except (SandboxError, OSError) as exc:  # ZygoteError among them
        if key not in _warned:
            _warned.add(key)
            logger.warning("pytest fork server unavailable, each run starts a fresh interpreter: %s", exc)
        return None
    return zygote


def release(zygote: Zygote, parent: Path | None = None) -> None:
    """Take a server back after its episode: swept clean and its folder emptied, it waits for the next
    one; otherwise it is ended."""
    zygote.release_workspace()
    try:
        clean = zygote.alive and bool(zygote.sweep().get("ok"))
    except ZygoteError:
        clean = False
    if clean:
        clean = _empty_folder(zygote)
    key = _key(zygote.sandbox, parent)
    with _lock:
        _fresh_after_fork()
        waiting = _idle.setdefault(key, [])
        if clean and len(waiting) < MAX_IDLE:
            waiting.append(zygote)
            return
    zygote.close()


def _empty_folder(zygote: Zygote) -> bool:
    """Remove everything the episode left in the server's folder (its workspace, anything else), never
    following a link; False if something stays."""
    for entry in os.scandir(zygote.folder):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass
    return not any(os.scandir(zygote.folder))


def close_all() -> None:
    """End every waiting server of this process (at exit, and for tests)."""
    with _lock:
        if os.getpid() != _owner:
            _idle.clear()
            return
        waiting = [z for servers in _idle.values() for z in servers]
        _idle.clear()
    for zygote in waiting:
        zygote.close()


atexit.register(close_all)
