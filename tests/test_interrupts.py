"""Ctrl-C stops a long command at once: real ``pdbgym`` processes get SIGINT mid-run.

Each must exit with 130 within seconds, say what it kept and how to resume, keep every finished
episode (and no half-written one) and leave no workspace in the temp folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from interruptfixtures import STOP_WITHIN_S, interrupt

from pdbgym.rollouts.cache import read_cache


def _cache_count(out: Path) -> int:
    return len(read_cache(out)) if (out / "manifest.json").exists() else 0


@pytest.mark.slow
@pytest.mark.parametrize("workers, group", [(1, False), (2, True)], ids=["threads", "worker-processes"])
def test_cache_build_stops_on_first_ctrl_c(tmp_path: Path, workers: int, group: bool) -> None:
    out = tmp_path / "cache"
    args = ["cache", "build", "--policy", "scripted", "--tasks", "builtin", "--runs", "3", "--out", str(out),
            "--workers", str(workers)]
    done, took = interrupt(args, tmp_path, lambda: _cache_count(out) >= 1, group=group)
    assert done.returncode == 130, done.stderr[-3000:]
    assert took < STOP_WITHIN_S
    kept = _cache_count(out)
    assert 1 <= kept < 63  # stopped early, every finished episode kept
    message = " ".join(done.stderr.split())
    assert f"{kept} new episode(s) saved to" in message and "rerun the same command to resume" in message
    assert len(list((out / "transcripts").iterdir())) == kept


@pytest.mark.slow
def test_eval_stops_on_first_ctrl_c_and_its_episodes_stay_reportable(tmp_path: Path) -> None:
    out = tmp_path / "campaign"
    episodes = out / "episodes.jsonl"
    args = ["eval", "--tasks", "builtin", "--arm", "oracle=scripted", "--runs", "3", "--out", str(out),
            "--workers", "1"]
    done, took = interrupt(args, tmp_path, lambda: episodes.exists() and episodes.read_text().count("\n") >= 1,
                            group=True)
    assert done.returncode == 130, done.stderr[-3000:]
    assert took < STOP_WITHIN_S
    rows = [json.loads(line) for line in episodes.read_text().splitlines()]
    message = " ".join(done.stderr.split())
    assert f"{len(rows)} new episode(s) saved to" in message and "pdbgym eval report" in message
    assert len(rows) < 63
    assert len(list((out / "transcripts").rglob("*.json"))) == len(rows)  # no episode half saved
    report = subprocess.run([sys.executable, "-m", "pdbgym.cli", "eval", "report", str(out)], capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
