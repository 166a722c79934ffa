"""Progress of long commands that stays visible when output goes to a file or a pipe.

On a terminal, :func:`progress` is a rich progress bar. Elsewhere (``cmd > log``, CI, ``| tee``) a bar
prints nothing useful, so it becomes plain lines ``[phase] done/total elapsed H:MM:SS``: one when a
phase starts or ends (none at its end when nothing changed since its last line, e.g. a phase that failed
at once), one when its total becomes known (a plan made after the phase started), at most one
every ``min_interval_s`` as work completes, and at least one every
``heartbeat_s`` even when nothing completes (a background timer), so a quiet log never means a hang.

Usage (the subset of ``rich.progress.Progress`` that pdbgym's commands use)::

    with progress(Console(stderr=True), disable=as_json) as bar_set:
        bar = bar_set.add_task("validating", total=None)
        bar_set.update(bar, total=21)
        bar_set.advance(bar)                      # one more done
        bar_set.update(bar, completed=7, description="toolz: 40 of 900 tried")

``PDBGYM_PROGRESS_HEARTBEAT_S`` overrides the heartbeat (seconds) of plain-line mode.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

HEARTBEAT_S = 30.0  # the longest a non-terminal log stays silent while a phase runs
MIN_INTERVAL_S = 5.0  # the shortest gap between two completion lines of one phase


def heartbeat_from_env(default: float = HEARTBEAT_S) -> float:
    """``PDBGYM_PROGRESS_HEARTBEAT_S`` when set to a positive number, else ``default`` (seconds)."""
    try:
        value = float(os.environ.get("PDBGYM_PROGRESS_HEARTBEAT_S", default))
    except ValueError:
        return default
    return value if value > 0 else default


def format_elapsed(seconds: float) -> str:
    """``H:MM:SS`` of a duration in seconds."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


@dataclass
class _Phase:
    description: str
    total: float | None
    completed: float = 0.0
    started: float = field(default_factory=time.monotonic)
    last_line: float = 0.0
    finished: bool = False
    shown: tuple[str, float | None, float] | None = None  # (description, total, completed) of its last line

    def state(self) -> tuple[str, float | None, float]:
        return self.description, self.total, self.completed


class TaskSet(Protocol):
    """What :func:`progress` yields: the subset of ``rich.progress.Progress`` that pdbgym's commands use
    (``PlainProgress`` and the disabled set take the same calls)."""

    def add_task(self, description: str, *, total: float | None = ..., completed: int = ...) -> TaskID: ...

    def update(self, task_id: TaskID, *, total: float | None = ..., completed: float | None = ...,
               advance: float | None = ..., description: str | None = ..., visible: bool | None = ...) -> None: ...

    def advance(self, task_id: TaskID, advance: float = ...) -> None: ...


class PlainProgress:
    """Rich-``Progress``-like task set printing plain progress lines (see the module docstring)."""

    def __init__(self, console: Console, heartbeat_s: float | None = None,
                 min_interval_s: float = MIN_INTERVAL_S) -> None:
        self.console = console
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else heartbeat_from_env()
        self.min_interval_s = min(min_interval_s, self.heartbeat_s)
        self._phases: dict[TaskID, _Phase] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._beat, name="pdbgym-progress", daemon=True)

    def __enter__(self) -> PlainProgress:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._timer.join()
        with self._lock:
            for phase in self._phases.values():
                if not phase.finished and phase.state() != phase.shown:  # a repeat would only add time
                    self._line(phase, time.monotonic())

    def add_task(self, description: str, total: float | None = None, completed: float = 0) -> TaskID:
        """A new phase and its start line; ``completed``: work already done before it (a resumed campaign)."""
        with self._lock:
            task_id = TaskID(len(self._phases))
            self._phases[task_id] = phase = _Phase(description, total, completed)
            self._line(phase, phase.started)
        return task_id

    def update(self, task_id: TaskID, *, completed: float | None = None, total: float | None = None,
               description: str | None = None, advance: float | None = None, visible: bool | None = None) -> None:
        """As rich's ``update``; ``visible`` is a bar's and means nothing to lines."""
        with self._lock:
            phase = self._phases[task_id]
            learned = total is not None and phase.total is None  # the plan: a log shows the total at once
            if total is not None:
                phase.total = total
            if description is not None:
                phase.description = description
            progressed = completed is not None or advance is not None
            if completed is not None:
                phase.completed = completed
            if advance is not None:
                phase.completed += advance
            now = time.monotonic()
            done = phase.total is not None and phase.completed >= phase.total
            if learned or ((progressed or description is not None)
                           and (done or now - phase.last_line >= self.min_interval_s)):
                self._line(phase, now)
                phase.finished = done

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def _line(self, phase: _Phase, now: float) -> None:
        """Print one phase's line (caller holds the lock)."""
        total = "?" if phase.total is None else f"{phase.total:g}"
        self.console.print(f"[{phase.description}] {phase.completed:g}/{total} "
                           f"elapsed {format_elapsed(now - phase.started)}",
                           markup=False, highlight=False, soft_wrap=True)
        self.console.file.flush()
        phase.last_line, phase.shown = now, phase.state()

    def _beat(self) -> None:
        """Every phase still running that printed nothing for ``heartbeat_s`` prints its line now."""
        tick = min(1.0, self.heartbeat_s / 4)
        while not self._stop.wait(tick):
            now = time.monotonic()
            with self._lock:
                for phase in self._phases.values():
                    if not phase.finished and now - phase.last_line >= self.heartbeat_s:
                        self._line(phase, now)


class _Silent:
    """The disabled task set: accepts every call, prints nothing (``--json`` output stays clean)."""

    def add_task(self, description: str, total: float | None = None, completed: float = 0) -> TaskID:
        return TaskID(0)

    def update(self, task_id: TaskID, *, total: float | None = None, completed: float | None = None,
               advance: float | None = None, description: str | None = None, visible: bool | None = None) -> None:
        return None

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        return None


@contextmanager
def progress(console: Console | None = None, *, disable: bool = False, transient: bool = False,
             heartbeat_s: float | None = None, min_interval_s: float = MIN_INTERVAL_S) -> Iterator[TaskSet]:
    """A task set for long work: a rich bar on a terminal, plain timed lines elsewhere, nothing if disabled.

    ``console`` defaults to one on stderr, so progress never mixes into a command's stdout results.
    """
    console = console or Console(stderr=True)
    if disable:
        yield _Silent()
    elif console.is_terminal:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=transient) as bars:
            yield bars
    else:
        with PlainProgress(console, heartbeat_s, min_interval_s) as plain:
            yield plain
