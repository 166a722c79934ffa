"""A command's time limit counts its own time: real processes crowded onto one core."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crowding import BUSY, busy_processes, one_core

from pdbgym.sandbox import Limits, Workspace, get_sandbox
from pdbgym.sandbox.cpuwait import CommandClock, schedstat_available
from pdbgym.sandbox.process import descendants

pytestmark = pytest.mark.skipif(not schedstat_available(), reason="this kernel reports no per-thread schedstat")

# Spins until it has had SECONDS of CPU, then says so: on an idle core that takes SECONDS of wall clock.
NEEDS_CPU = """
import sys, time
need = float(sys.argv[1])
while time.process_time() < need:
    pass
print("had", need, "s of CPU")
"""


@pytest.fixture
def workspace(tmp_path: Path):
    source = tmp_path / "project"
    source.mkdir()
    (source / "needs_cpu.py").write_text(NEEDS_CPU)
    with Workspace.create(source, parent=tmp_path / "workspaces") as ws:
        yield ws.path


def own_and_wall(code: str, seconds: float) -> tuple[float, float]:
    """A ``CommandClock``'s own and wall-clock seconds for a process running ``code``, read after ``seconds``."""
    process = subprocess.Popen([sys.executable, "-c", code])
    try:
        clock = CommandClock(process.pid, budget_s=100.0)
        time.sleep(seconds)
        return clock.own(), clock.elapsed()
    finally:
        process.kill()
        process.wait()


def test_a_starved_process_is_not_charged_for_its_wait():
    with one_core(), busy_processes(3):
        own, wall = own_and_wall(BUSY, 2.0)
    # Four busy processes on one core: the spinner runs about a quarter of the time.
    assert own < 0.6 * wall, (own, wall)
    assert own > 0.1 * wall, (own, wall)


def test_an_idle_or_sleeping_process_is_charged_the_wall_clock():
    own, wall = own_and_wall("import time; time.sleep(30)", 1.0)
    assert own > 0.9 * wall, (own, wall)


def test_a_test_run_on_a_crowded_core_gets_its_budget_of_its_own_time(workspace):
    """1.2 s of CPU under a 2.5 s limit, on a core shared with three busy processes: about 5 s of wall clock.
    The wall clock alone would stop it at 2.5 s with about 0.6 s of CPU had."""
    sandbox = get_sandbox("auto")
    with one_core(), busy_processes(3):
        started = time.monotonic()
        result = sandbox.run([sys.executable, "needs_cpu.py", "1.2"], workspace, Limits(wall_time_s=2.5))
        wall = time.monotonic() - started
    assert not result.timed_out, (wall, result.output)
    assert "had 1.2 s of CPU" in result.output
    assert wall > 2.5  # it did wait for the CPU: the limit was not simply generous


CROWD = ("import os, time\n"
         "for _ in range(12):\n"
         "    if os.fork() == 0:\n"
         "        while True: pass\n"
         "time.sleep(600)\n")


def test_a_run_that_crowds_the_core_itself_is_ended_all_the_same(workspace):
    """A command may slow its own clock by keeping many processes runnable (each waits for the core); the
    cap of WALL_CAP_FACTOR times the budget ends it anyway."""
    sandbox = get_sandbox("auto")
    with one_core():
        started = time.monotonic()
        result = sandbox.run([sys.executable, "-c", CROWD], workspace, Limits(wall_time_s=1.0))
        wall = time.monotonic() - started
    assert result.timed_out
    assert wall > 2.0, wall  # its own clock was slowed, as the crowd meant


def test_the_cap_ends_a_command_whose_own_time_is_not_spent():
    with one_core():
        process = subprocess.Popen([sys.executable, "-c", CROWD], start_new_session=True)
    try:
        while len(descendants(process.pid)) < 12:  # the clock starts once the crowd is there
            time.sleep(0.01)
        clock = CommandClock(process.pid, budget_s=0.5)
        while clock.remaining() > 0:
            time.sleep(clock.remaining())
        # Twelve spinning children: the command's own clock moves at about a thirteenth of the wall clock's
        # pace, so the cap, not the budget, ended the wait.
        assert clock.own() < clock.budget_s
        assert clock.elapsed() >= clock.wall_cap_s - 0.01
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_sleeping_run_is_still_ended_on_time(workspace):
    sandbox = get_sandbox("auto")
    result = sandbox.run([sys.executable, "-c", "import time; time.sleep(60)"], workspace, Limits(wall_time_s=1.0))
    assert result.timed_out  # after its 1 s: sleeping counts as the command's own time


def test_no_process_means_the_wall_clock():
    clock = CommandClock(None, budget_s=0.3)
    assert clock.remaining() > 0.2
    time.sleep(0.35)
    assert clock.remaining() == 0.0
