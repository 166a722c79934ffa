"""Long commands print progress lines with known totals when their output is piped (not a terminal)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from homefixtures import fresh_home

LINE = re.compile(r"^\[(?P<phase>[^\]]*)\] (?P<done>\d+)/(?P<total>\S+) elapsed \d+:\d\d:\d\d$", re.M)


def _piped(args: list[str], tmp_path: Path) -> list[tuple[str, str, str]]:
    env = {"PDBGYM_HOME": str(fresh_home(tmp_path / "home")), "PDBGYM_PROGRESS_HEARTBEAT_S": "1"}
    import os

    done = subprocess.run([sys.executable, "-m", "pdbgym.cli", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return [(m["phase"], m["done"], m["total"]) for m in LINE.finditer(done.stderr)]


@pytest.mark.slow
def test_cache_build_prints_episode_lines_with_the_total_once_episodes_start(tiny_task, tmp_path: Path) -> None:
    lines = _piped(["cache", "build", "--policy", "scripted", "--tasks", str(tiny_task.path), "--runs", "3",
                    "--workers", "1", "--out", str(tmp_path / "cache")], tmp_path)
    episodes = [line for line in lines if line[0].startswith("episodes")]
    # "?" only while the policy loads, before the plan; every line counting an episode knows the total
    assert episodes and all(total == "3" for _, done, total in episodes if done != "0"), lines
    assert episodes[-1][1:] == ("3", "3")


@pytest.mark.slow
def test_eval_prints_episode_lines_with_the_campaign_total(tiny_task, tmp_path: Path) -> None:
    lines = _piped(["eval", "--tasks", str(tiny_task.path), "--arm", "a=scripted", "--arm", "b=scripted", "--runs", "2",
                    "--workers", "1", "--out", str(tmp_path / "campaign")], tmp_path)
    episodes = [line for line in lines if line[0].startswith("episodes")]
    assert episodes and all(total == "4" for _, done, total in episodes if done != "0"), lines
    assert episodes[-1][1:] == ("4", "4")
