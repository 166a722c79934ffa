"""What the two-process GRPO tests share: accelerate's launch of 2 DDP processes (the shipped ddp.yaml, gloo
on CPU) and the checks every such run must pass (one writer, ranks that agree on every step)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from homefixtures import fresh_home

REPO = Path(__file__).resolve().parents[2]
DDP_CONFIG = REPO / "pdbgym" / "train" / "configs" / "ddp.yaml"
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(DDP_CONFIG),
          "--num_processes", "2", "--mixed_precision", "no"]


def launch(argv: list[str], home: Path) -> subprocess.CompletedProcess:
    """``argv`` run on 2 processes by accelerate, one torch thread each, in a fresh home at ``home``."""
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PDBGYM_HOME": str(fresh_home(home)),
           "TRL_EXPERIMENTAL_SILENCE": "1"}
    result = subprocess.run([*LAUNCH, *argv], capture_output=True, text=True, timeout=500, env=env, cwd=REPO)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    return result


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_one_writer_and_agreeing_ranks(out: Path, steps: int, group: int, tasks_per_step: int) -> list[dict]:
    """Checks shared by both runs; returns rank 0's rows."""
    rows = jsonl(out / "steps.jsonl")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))  # each step once: one process writes
    ranks = [jsonl(out / "ranks" / f"rank-{rank}.jsonl") for rank in (0, 1)]
    assert sorted(p.name for p in (out / "ranks").iterdir()) == ["rank-0.jsonl", "rank-1.jsonl"]
    for rank, own in enumerate(ranks):
        assert [r["step"] for r in own] == list(range(1, steps + 1)) and {r["rank"] for r in own} == {rank}
    for zero, one, logged in zip(ranks[0], ranks[1], rows, strict=True):
        # the step's groups are split, not repeated: G x tasks_per_step episodes over both processes
        assert zero["episodes"] == one["episodes"] == group * tasks_per_step // 2
        assert zero["episodes_all_ranks"] == one["episodes_all_ranks"] == group * tasks_per_step
        shared = {k: v for k, v in zero.items() if k not in ("rank", "episodes")}
        assert shared == {k: v for k, v in one.items() if k not in ("rank", "episodes")}
        assert logged["turn_budget"] == zero["turn_budget"] and logged["beta"] == pytest.approx(zero["beta"])
    record = json.loads((out / "grpo_run.json").read_text())
    assert record["steps"] == steps
    return ranks[0]
