"""A command's own time: wall-clock seconds less the time its processes waited for a CPU.

A pdb command or a test run is stopped after a number of seconds. Counted on the wall clock, that limit
changes meaning with the host's load: on a host with five runnable processes a core, a command that needs 3 s
of CPU (pytest importing itself under the debugger's trace) gets 2 s of it in 10 wall-clock seconds and is
interrupted, though on an idle host it finishes. An episode's outcome then depends on what else the machine
runs, which no evaluation may allow.

``CommandClock`` counts what the command itself spent: running, or blocked on its own account (sleeping,
waiting for input or a lock), but not runnable while it waited for a CPU the host gave to others. The kernel
reports that wait per thread as the second field of ``/proc/<pid>/task/<tid>/schedstat`` (run-queue delay,
in nanoseconds). The clock reads it for the command's root process and all its descendants and takes the
largest increase of any one thread since the command began: the time the command's busiest thread stood
ready but unrun. Its own time is the wall clock less that.

Two bounds keep it honest:

- **A wall-clock cap** (``wall_cap_s``: ``WALL_CAP_FACTOR`` times the budget). A command that
  makes its own contention (many busy processes on few cores) grows its threads' run-queue delays and so
  slows its own clock; the cap ends it regardless. The cap is per clock: a pdb command's wait, each of the
  interrupt's grace periods and a restart's start-up each have one.
- **No schedstat, no discount.** Where the kernel has no per-thread schedstat (``CONFIG_SCHED_INFO`` off),
  the clock is the wall clock, as before.

Reading a hostile process tree's ``/proc`` entries is safe here: the kernel writes them, a process can only
vanish (its delay then stays counted as the largest seen) or be born (its delay counts from zero), and every
number parsed is bounded by the cap. The tree is read once at the start and then, only after the wall clock
alone has spent the budget, at most every ``MIN_POLL_S``; its size is bounded by the command's process
limit. A root pid that ended and was reused by an unrelated process can only make the limit last longer,
up to the cap.
"""

from __future__ import annotations

import os
import time
from functools import cache

from pdbgym.sandbox.process import descendants

WALL_CAP_FACTOR = 6.0  # a command's wall-clock time is at most this many times its budget
TOLERANCE_S = 0.01  # a budget with less than this left is spent
MIN_POLL_S = 0.05  # the shortest wait between two readings (own time may grow far slower than the wall clock)


@cache
def schedstat_available() -> bool:
    """Whether this kernel reports per-thread run-queue delay (``/proc/self/schedstat``, three numbers)."""
    try:
        with open("/proc/self/schedstat", encoding="ascii") as stat:
            fields = stat.read().split()
    except OSError:
        return False
    return len(fields) == 3 and all(field.isdigit() for field in fields)


def run_delays(pid: int) -> dict[int, int]:
    """Run-queue delay (ns) of every thread of ``pid`` and its live descendants, by thread id."""
    delays: dict[int, int] = {}
    for process in (pid, *descendants(pid)):
        try:
            threads = os.listdir(f"/proc/{process}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                with open(f"/proc/{process}/task/{thread}/schedstat", encoding="ascii") as stat:
                    fields = stat.read(128).split()
                delays[int(thread)] = int(fields[1])
            except (OSError, ValueError, IndexError):
                continue
    return delays


class CommandClock:
    """Seconds a command has had of ``budget_s``, its CPU waits left out (see the module).

    ``pid``: the command's root process (None: the wall clock alone). ``remaining()`` is how long to wait
    before asking again: never past the point where the budget could be spent, since own time grows at most as
    fast as the wall clock.
    """

    def __init__(self, pid: int | None, budget_s: float) -> None:
        self.pid = pid if pid is not None and schedstat_available() else None
        self.budget_s = budget_s
        self.wall_cap_s = budget_s * WALL_CAP_FACTOR
        self.started = time.monotonic()
        self.waited_s = 0.0  # the largest run-queue delay of one thread since the start (seconds)
        self._base = run_delays(self.pid) if self.pid is not None else {}
        self._read_at = self.started

    def elapsed(self) -> float:
        """Wall-clock seconds since the start."""
        return time.monotonic() - self.started

    def own(self) -> float:
        """The command's own seconds so far: wall clock less the CPU wait. The wait is read again only when
        ``MIN_POLL_S`` has passed since the last reading (a command printing without pause is read at that
        pace, not once a chunk); a reading that old only makes the own time look larger by at most that."""
        if self.pid is not None and time.monotonic() - self._read_at >= MIN_POLL_S:
            now = run_delays(self.pid)
            self._read_at = time.monotonic()
            # A thread seen at the start counts from its reading then; one born since, from zero.
            grown = max((delay - self._base.get(tid, 0) for tid, delay in now.items()), default=0)
            self.waited_s = max(self.waited_s, grown / 1e9)
        wall = self.elapsed()  # after the reading, which takes time of its own on a big tree
        return wall - min(self.waited_s, wall)

    def remaining(self) -> float:
        """Seconds to wait before asking again; 0 once the budget or the wall-clock cap is spent. The
        ``/proc`` readings are taken only once the wall clock alone has spent the budget."""
        left = self.budget_s - self.elapsed()
        if left > TOLERANCE_S:
            return left
        if self.pid is None:
            return 0.0
        own = self.own()
        left = min(self.budget_s - own, self.wall_cap_s - self.elapsed())
        return 0.0 if left <= TOLERANCE_S else max(left, MIN_POLL_S)
