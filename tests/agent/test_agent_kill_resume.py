"""A cache build killed mid-run keeps every finished episode, and the rerun completes the rest."""

import os
import signal
import subprocess
import sys
import time

import pytest

from pdbgym.rollouts.cache import read_cache

BUILD = ("import sys, typer; from pdbgym.agent.commands import cache_build_command; "
         "app = typer.Typer(); app.command()(cache_build_command); app(sys.argv[1:])")


@pytest.mark.slow
def test_kill_then_rerun_loses_nothing(tiny_task, tmp_path, smol_tokenizer):
    out = tmp_path / "cache"
    args = [sys.executable, "-c", BUILD, "--policy", "scripted", "--tasks", str(tiny_task.path), "--runs", "2",
            "--out", str(out), "--workers", "1", "--json"]
    # SIGKILL leaves the killed episode's workspace behind; keep it under tmp_path, not the system /tmp.
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env)
    deadline = time.monotonic() + 120
    while not ((out / "manifest.json").exists() and read_cache(out)):
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the build and its pdb/pytest children, mid-episode 2
    process.wait()
    survived = {r.sample_idx for r in read_cache(out)}
    assert survived == {0}
    rerun = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert sorted(r.sample_idx for r in read_cache(out)) == [0, 1]
    assert all(r.termination_reason == "solved" for r in read_cache(out))
