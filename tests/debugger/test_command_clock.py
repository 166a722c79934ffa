"""A pdb command's time limit means the same on a crowded host: a real session, real busy processes.

The held-out campaign of 2026-12-06 (docs/runs/2026-12-06-smollm2-ladder-seeds-run4.md) played 192 episodes at
once on 16 cores; with the load near 180, `c` from the first prompt (pytest importing itself under the
debugger's trace) took over 10 s of wall clock, was interrupted, and the trained models' episodes went astray.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from crowding import busy_processes, one_core

from pdbgym.debugger import PdbSession
from pdbgym.sandbox import Workspace, get_sandbox
from pdbgym.sandbox.cpuwait import schedstat_available

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not schedstat_available(), reason="this kernel reports no per-thread schedstat")]

SPIN = """\
count = 0


def spin():
    global count
    while True:
        count += 1
"""

TESTS = """\
import spin


def test_spin():
    spin.spin()
"""


@pytest.fixture
def workspace(tmp_path: Path):
    source = tmp_path / "project"
    (source / "tests").mkdir(parents=True)
    (source / "spin.py").write_text(SPIN)
    (source / "tests" / "test_spin.py").write_text(TESTS)
    with Workspace.create(source, parent=tmp_path / "ws") as ws:
        yield ws.path


def spun(workspace: Path, crowd: int) -> tuple[int, float]:
    """Loop iterations a `c` into the endless loop makes before its 1 s limit, with ``crowd`` busy processes
    beside it on the same core, and that command's wall-clock seconds."""
    with one_core(), PdbSession(get_sandbox("auto"), workspace, "tests/test_spin.py::test_spin",
                                command_timeout_s=1.0, keep_spare=False) as session:
        session.start()
        session.send("b spin.py:7")
        assert "spin()" in session.send("c", timeout_s=60).output
        session.send("cl 1")
        with busy_processes(crowd):
            started = time.monotonic()
            reply = session.send("c")
            wall = time.monotonic() - started
        assert reply.interrupted and "SIGINT" in reply.note, reply
        return int(session.send("p count").output), wall


def test_a_crowded_core_does_not_cut_a_command_short(workspace):
    alone, _ = spun(workspace, 0)
    crowded, wall = spun(workspace, 3)
    # Counted on the wall clock the loop would have had about a quarter of the core for 1 s: a quarter of the
    # iterations. Counted in its own time it gets about the second it gets alone.
    assert crowded > 0.5 * alone, (crowded, alone, wall)
    assert wall > 1.8, wall
