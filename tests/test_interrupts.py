"""Ctrl-C stops a long command at once: real ``pdbgym`` processes get SIGINT mid-run (eval also mid-KL-scoring).

Each must exit with 130 (how long a stop takes is measured by bench/interrupt_stop.py), say what it kept and how to resume, keep every finished
episode (and no half-written one) and leave no workspace in the temp folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from interruptfixtures import interrupt

from pdbgym.rollouts.cache import read_cache


def _cache_count(out: Path) -> int:
    return len(read_cache(out)) if (out / "manifest.json").exists() else 0


@pytest.mark.slow
@pytest.mark.parametrize("workers, group", [(1, False), (2, True)], ids=["threads", "worker-processes"])
def test_cache_build_stops_on_first_ctrl_c(tmp_path: Path, workers: int, group: bool) -> None:
    out = tmp_path / "cache"
    args = ["cache", "build", "--policy", "scripted", "--tasks", "builtin", "--runs", "3", "--out", str(out),
            "--workers", str(workers)]
    done = interrupt(args, tmp_path, lambda: _cache_count(out) >= 1, group=group)
    assert done.returncode == 130, done.stderr[-3000:]
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
    done = interrupt(args, tmp_path, lambda: episodes.exists() and episodes.read_text().count("\n") >= 1,
                     group=True)
    assert done.returncode == 130, done.stderr[-3000:]
    rows = [json.loads(line) for line in episodes.read_text().splitlines()]
    message = " ".join(done.stderr.split())
    assert f"{len(rows)} new episode(s) saved to" in message and "pdbgym eval report" in message
    assert len(rows) < 63
    assert len(list((out / "transcripts").rglob("*.json"))) == len(rows)  # no episode half saved
    report = subprocess.run([sys.executable, "-m", "pdbgym.cli", "eval", "report", str(out)], capture_output=True,
                            text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]


@pytest.mark.slow
def test_eval_ctrl_c_after_a_local_model_episode_exits_130(tmp_path: Path) -> None:
    """Once an episode of the embedded model had finished, the interpreter's teardown met a native thread
    of the model's libraries and aborted ("terminate called without an active exception", exit 134),
    every time, after the right message; now the process leaves with 130 as for any interrupt."""
    out = tmp_path / "campaign"
    episodes = out / "episodes.jsonl"
    args = ["eval", "--tasks", "builtin", "--arm", "a=embedded", "--runs", "1", "--turn-budget", "2",
            "--max-new-tokens", "16", "--out", str(out), "--workers", "1"]
    done = interrupt(args, tmp_path, lambda: episodes.exists() and episodes.read_text().count("\n") >= 1,
                     group=False)
    assert done.returncode == 130, done.stderr[-3000:]
    assert "terminate called" not in done.stderr and "new episode(s) saved to" in " ".join(done.stderr.split())


@pytest.mark.slow
def test_eval_ctrl_c_while_scoring_kl_keeps_the_episodes_and_the_scored_arms(tiny_task, smol_tokenizer,
                                                                           tmp_path: Path) -> None:
    """A finished campaign rerun with a teacher cache goes straight to the KL scoring, one arm after the other
    (each its own model folder, so none reuses another's arrays); Ctrl-C once the first arm's arrays are
    down: exit 130, what is kept and how to finish said, no episode touched; the rerun scores only the rest."""
    from modelfixtures import save_tiny_llama

    arms = []
    for seed in range(6):
        arms += ["--arm", f"m{seed}={save_tiny_llama(tmp_path / f'm{seed}', smol_tokenizer, seed=seed)}"]
    out, cache, work = tmp_path / "campaign", tmp_path / "oracle", tmp_path / "campaign" / "divergence-work"
    common = ["eval", "--tasks", str(tiny_task.path), *arms, "--runs", "1", "--turn-budget", "1", "--max-new-tokens",
              "8", "--max-context-tokens", "4096", "--workers", "1", "--out", str(out)]

    def pdbgym(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-m", "pdbgym.cli", *args], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    pdbgym("cache", "build", "--policy", "scripted", "--tasks", str(tiny_task.path), "--out", str(cache))
    pdbgym(*common)
    episodes = (out / "episodes.jsonl").read_text()
    assert episodes.count("\n") == 6
    done = interrupt([*common, "--teacher-cache", str(cache)], tmp_path,
                           lambda: work.is_dir() and any(p.is_file() and not p.name.endswith(".tmp")  # written,
                                                         for p in work.rglob("*")), group=True)  # not mid-write
    assert done.returncode == 130, done.stderr[-3000:]
    message = " ".join(done.stderr.split())
    assert "interrupted while scoring KL" in message and "rerun the same command to finish the scoring" in message
    assert (out / "episodes.jsonl").read_text() == episodes and not (out / "divergence.json").exists()
    kept = {path: path.stat().st_mtime_ns for path in work.rglob("*") if path.is_file()}
    assert kept
    pdbgym(*common, "--teacher-cache", str(cache), "--json", str(tmp_path / "summary.json"))
    assert (out / "episodes.jsonl").read_text() == episodes  # no episode played again
    assert all(path.stat().st_mtime_ns == when for path, when in kept.items())  # nor an arm scored again
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert all(summary["arms"][f"m{seed}"]["divergence"]["available"] for seed in range(6))


# Runs as its own process: a child subreaper, so whatever the killed command leaves running is
# re-parented here, where it can be counted and reaped; prints what was still running when it gave up.
ORPHAN_WATCH = r"""
import ctypes, json, os, signal, subprocess, sys, time
from pathlib import Path
from pdbgym.sandbox.process import cmdline, descendants
args, episodes, limit = json.loads(sys.argv[1])
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
command = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 300
while not (Path(episodes).exists() and Path(episodes).read_text().count("\n") >= 1):
    assert command.poll() is None and time.monotonic() < deadline, "no episode finished"
    time.sleep(0.1)
workers = descendants(command.pid)
os.kill(command.pid, signal.SIGKILL)  # the command alone, as the OOM killer or a scheduler would
command.wait()
killed, left = time.monotonic(), []
while time.monotonic() - killed < limit:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:  # nothing of it left
        break
    time.sleep(0.1)
else:
    orphans = descendants(os.getpid())
    left = [" ".join(cmdline(pid))[:120] for pid in orphans]
    for pid in orphans:  # a failing run leaves nothing running either
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
print(json.dumps({"workers": len(workers), "seconds": time.monotonic() - killed, "left": left}))
"""


@pytest.mark.slow
def test_an_eval_killed_outright_leaves_no_worker_sandbox_or_workspace_running(tmp_path: Path) -> None:
    """SIGKILL to the command alone (it cannot tell its workers): each worker sees its parent gone, stops
    its episode, removes its workspaces and exits, and its sandboxes die with it."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    out = tmp_path / "campaign"
    args = [sys.executable, "-m", "pdbgym.cli", "eval", "--tasks", "builtin", "--arm", "oracle=scripted", "--runs",
            "3", "--out", str(out), "--workers", "2"]
    watch = subprocess.run([sys.executable, "-c", ORPHAN_WATCH, json.dumps([args, str(out / "episodes.jsonl"), 60])],
                           capture_output=True, text=True, timeout=420, env={**os.environ, "TMPDIR": str(temp)})
    assert watch.returncode == 0, watch.stderr[-3000:]
    seen = json.loads(watch.stdout.splitlines()[-1])
    assert seen["workers"] >= 3  # two worker processes and the resource tracker (with their sandboxes) ran
    assert seen["left"] == [], seen  # within the watch's 60 s, after which anything left counts as hung
    assert not [p.name for p in temp.iterdir() if p.name.startswith("pdbgym-ws-")]
