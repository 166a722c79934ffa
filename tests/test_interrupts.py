"""Ctrl-C stops a long command at once: real ``pdbgym`` processes get SIGINT mid-run.

Each must exit with 130 within seconds, say what it kept and how to resume, keep every finished
episode (and no half-written one) and leave no workspace in the temp folder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pdbgym.rollouts.cache import read_cache

STOP_WITHIN_S = 20.0  # generous for a loaded 2-core machine; an orderly stop takes a few seconds


def _interrupt(args: list[str], tmp_path: Path, started: Callable[[], bool], *, group: bool
               ) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``pdbgym ARGS``, send SIGINT once ``started()`` holds; return the outcome and the seconds it took."""
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
    sent = time.monotonic()
    if group:  # what a terminal's Ctrl-C does: the whole foreground group, workers included
        os.killpg(process.pid, signal.SIGINT)
    else:
        os.kill(process.pid, signal.SIGINT)
    try:
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    took = time.monotonic() - sent
    left = [p.name for p in temp.iterdir() if p.name.startswith("pdbgym-ws-")]
    assert not left, f"workspaces left behind: {left}"
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr), took


def _cache_count(out: Path) -> int:
    return len(read_cache(out)) if (out / "manifest.json").exists() else 0


@pytest.mark.slow
@pytest.mark.parametrize("workers, group", [(1, False), (2, True)], ids=["threads", "worker-processes"])
def test_cache_build_stops_on_first_ctrl_c(tmp_path: Path, workers: int, group: bool) -> None:
    out = tmp_path / "cache"
    args = ["cache", "build", "--policy", "scripted", "--tasks", "builtin", "--runs", "3", "--out", str(out),
            "--workers", str(workers)]
    done, took = _interrupt(args, tmp_path, lambda: _cache_count(out) >= 1, group=group)
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
    done, took = _interrupt(args, tmp_path, lambda: episodes.exists() and episodes.read_text().count("\n") >= 1,
                            group=True)
    assert done.returncode == 130, done.stderr[-3000:]
    assert took < STOP_WITHIN_S
    rows = [json.loads(line) for line in episodes.read_text().splitlines()]
    message = " ".join(done.stderr.split())
    assert f"{len(rows)} new episode(s) saved to" in message and "pdbgym eval report" in message
    assert len(rows) < 63
    report = subprocess.run([sys.executable, "-m", "pdbgym.cli", "eval", "report", str(out)], capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
