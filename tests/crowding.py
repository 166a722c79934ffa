"""A crowded CPU for tests of time limits: this process pinned to one core, and busy processes beside it."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BUSY = "while True: pass"
LOCK = Path(tempfile.gettempdir()) / "pdbgym-tests-one-core.lock"


@contextmanager
def one_core() -> Iterator[int]:
    """Pin this process (and so every process it starts meanwhile) to one core; restore after. One test at a
    time on the machine holds it (a file lock), so the test workers' crowds never share the core."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = os.sched_getaffinity(0)
        core = max(before)
        os.sched_setaffinity(0, {core})
        try:
            yield core
        finally:
            os.sched_setaffinity(0, before)
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextmanager
def busy_processes(count: int) -> Iterator[list[subprocess.Popen]]:
    """``count`` processes spinning on the CPU (on this process's cores), killed after. Each leads a session
    of its own, so where the kernel groups a session's processes for fairness (autogroup) each still takes an
    equal share, as a sandboxed command in its own session does."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY], start_new_session=True) for _ in range(count)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
