"""Stopping a long command on the first Ctrl-C: no new episode starts, episodes in flight end cleanly.

Ctrl-C raises ``KeyboardInterrupt`` in the main thread only. Episodes that run in other threads (a
local model's episodes, each on its own event loop) or in worker processes would go on unless told,
and a thread pool's orderly shutdown would even start every queued one. So the command's executor,
on the interrupt, calls :func:`request_stop`: the flag every job reads before it starts is set, and
every episode registered with :func:`tracked` has its asyncio task cancelled (its ``finally`` blocks
close the environment, so no workspace stays behind). Worker processes ignore SIGINT and stop on
SIGTERM from their parent (:func:`stop_on_sigterm`), so one Ctrl-C is one orderly stop wherever it
was delivered.

:class:`Interrupted` is what a command raises once it has stopped: its message says what was kept and
how to resume; the command line prints it and exits with 130 (128 + SIGINT, the shell's convention).
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn

EXIT_INTERRUPTED = 130  # 128 + SIGINT
EXIT_ORPHANED = 129  # 128 + SIGHUP: a worker whose parent died, as a terminal's hang-up ends its jobs

_stop = threading.Event()
_lock = threading.RLock()  # re-entrant: a signal handler may run while this thread holds it
_running: set[tuple[asyncio.AbstractEventLoop, asyncio.Task[object]]] = set()


def exit_interrupted() -> NoReturn:
    """Leave the process with ``EXIT_INTERRUPTED`` once a command stopped on Ctrl-C.

    What a normal exit runs is run first (the exit handlers: warm sandboxes closed, workspaces removed;
    standard streams flushed), then the process ends without the interpreter's finalization. A local
    model's native libraries can leave a C++ thread running, and tearing the interpreter down around it
    ended in ``std::terminate`` ("terminate called without an active exception", exit 134) once a model
    episode had finished; the interrupt is then reported with the status a shell expects."""
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(EXIT_INTERRUPTED)


class Interrupted(Exception):  # noqa: N818 - the user's word for what happened
    """A command stopped by Ctrl-C; the message says what was kept and how to resume."""


def stop_requested() -> bool:
    """Whether this process was told to stop (a job about to start must not)."""
    return _stop.is_set()


def clear_stop() -> None:
    """Forget an earlier stop (a new batch of work in the same process starts clean)."""
    _stop.clear()


def request_stop() -> int:
    """Stop this process's work: no job starts from now on and every tracked episode is cancelled.

    Returns how many episodes in flight were cancelled. Safe to call from any thread, any number of times.
    """
    _stop.set()
    with _lock:
        running = list(_running)
    for loop, task in running:
        if not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
    return len(running)


@contextmanager
def tracked(loop: asyncio.AbstractEventLoop, task: asyncio.Task[object]) -> Iterator[None]:
    """Register ``task`` (running on ``loop``, in any thread) for cancellation by :func:`request_stop`."""
    entry = (loop, task)
    with _lock:
        _running.add(entry)
    try:
        if _stop.is_set():
            task.cancel()
        yield
    finally:
        with _lock:
            _running.discard(entry)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold a Ctrl-C that arrives during the block until the block ends, then raise it.

    For what must be written whole: a finished episode's transcript, record and row. Only the main
    thread receives signals, so elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held and previous is not signal.SIG_IGN:
            raise KeyboardInterrupt


def _stop_here(signum: int, frame: FrameType | None) -> None:
    request_stop()  # no exception at a random line: the episode's task is cancelled and unwinds at an await


def stop_on_sigterm() -> None:
    """A worker process's signals: SIGINT ignored (its parent decides), SIGTERM stops its work as Ctrl-C does."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop_here)


def end_with_parent(grace: float) -> threading.Thread | None:
    """In a worker process: once the process that started it is gone, stop as SIGTERM stops it, then exit.

    A parent killed with SIGKILL (the out-of-memory killer, a scheduler's time limit, ``kill -9``) cannot
    tell its workers, and an orphaned worker would play on, its sandboxes alive. A daemon thread waits on
    the parent's sentinel (``multiprocessing.parent_process()``), which becomes ready when the parent
    dies: no job starts after that, the episodes in flight are cancelled and get up to ``grace`` seconds
    to unwind (closing their environments, so their workspaces are removed), the exit handlers run (warm
    sandboxes closed, staged files removed), and the process exits with ``EXIT_ORPHANED``; any sandbox
    still running dies with it (bubblewrap's ``--die-with-parent``). Returns the thread, or None outside
    a ``multiprocessing`` child.
    """
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return None
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        request_stop()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with _lock:
                if not _running:
                    break
            time.sleep(0.05)
        atexit._run_exitfuncs()  # what a normal exit runs: warm sandboxes closed, their workspaces removed
        os._exit(EXIT_ORPHANED)

    thread = threading.Thread(target=watch, name="pdbgym-parent-watch", daemon=True)
    thread.start()
    return thread
