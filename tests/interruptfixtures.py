"""Sending Ctrl-C to a real ``pdbgym`` process, for the tests that it stops at once and cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

HUNG_AFTER_S = 120.0  # a stop not over by then is hung (an orderly one takes seconds; bench/interrupt_stop.py)


def interrupt(args: list[str], tmp_path: Path, started: Callable[[], bool], *, group: bool
               ) -> subprocess.CompletedProcess[str]:
    """Run ``pdbgym ARGS``, send SIGINT once ``started()`` holds; return the outcome. Stopping runs no
    longer than it takes: ``HUNG_AFTER_S`` only ends a test whose command never stops."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "pdbgym.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TMPDIR": str(temp)}, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a shell's background job ignores it
    deadline = time.monotonic() + 300
    while not started():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no episode finished in 300 s"
        time.sleep(0.1)
    if group:  # what a terminal's Ctrl-C does: the whole foreground group, workers included
        os.killpg(process.pid, signal.SIGINT)
    else:
        os.kill(process.pid, signal.SIGINT)
    try:
        stdout, stderr = process.communicate(timeout=HUNG_AFTER_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    left = [p.name for p in temp.iterdir() if p.name.startswith("pdbgym-ws-")]
    assert not left, f"workspaces left behind: {left}"
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
