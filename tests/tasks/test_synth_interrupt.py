"""Ctrl-C stops `pdbgym tasks synth` at once, keeps what it tried, and a rerun goes on from there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from interruptfixtures import interrupt
from test_synth_fixtures import write_shop

from pdbgym.tasks.synth.engine import STATE_DIR, STATE_FILE


@pytest.mark.slow
def test_ctrl_c_keeps_the_tried_candidates_and_the_rerun_resumes(tmp_path: Path) -> None:
    project = write_shop(tmp_path)
    out = tmp_path / "tasks"
    args = ["tasks", "synth", str(project), "--out", str(out), "--max", "50", "--seed", "3", "--workers", "1",
            "--baseline-runs", "1", "--timeout", "2"]
    state = out / STATE_DIR / project.name / STATE_FILE

    def tried() -> int:
        try:
            return len(json.loads(state.read_text()).get("tested", {}))
        except (OSError, ValueError):
            return 0

    done = interrupt(args, tmp_path, lambda: tried() >= 2, group=True)
    assert done.returncode == 130, done.stderr[-3000:]
    message = " ".join(done.stderr.split())
    assert "rerun the same command to resume" in message and str(out / STATE_DIR) in message
    assert not list((out / STATE_DIR / project.name).glob("hot*"))  # warm test servers stopped
    kept = tried()
    assert kept >= 2
    rerun = subprocess.run([sys.executable, "-m", "pdbgym.cli", *args, "--max-candidates", str(kept)],
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert tried() == kept  # every candidate tried before the interrupt was reused, none tried again
