"""`pdbgym train grpo` on 2 DDP processes (accelerate launch with the shipped ddp.yaml, gloo on CPU).

What must hold with N processes: `--tasks-per-step` stays the global number of groups a step (each
process plays tasks_per_step / N whole groups); one process writes steps.jsonl, gates.jsonl, the adapter,
the store registration and grpo_run.json; and every process holds the same recipe state after every step
(turn budget, beta, counters), because the episode facts of all processes are gathered before the
curriculum and the counters see them. Each process logs its own view of every step to
``ranks/rank-R.jsonl``; the tests compare the two files.

The toy run (this file run as a script under accelerate) uses the solve-rate curriculum on a task a
random model solves about a third of the time, with one group of 4 per process: the two groups' solve rates
differ often enough that ranks updating the budget from their own episodes only would drift apart. The CLI
run plays real pdbgym episodes of the toy task suite on both processes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# This file also runs as a script under accelerate (main below), where tests/ is not on sys.path.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play  # noqa: E402
from homefixtures import fresh_home  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DDP_CONFIG = REPO / "pdbgym" / "train" / "configs" / "ddp.yaml"
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(DDP_CONFIG),
          "--num_processes", "2", "--mixed_precision", "no"]
TOY = dict(group=4, tasks_per_step=2, steps=3, save_steps=1, curriculum="solve_rate", budget_start=2,
           budget_end=9, budget_threshold=0.5, budget_increment=1, replay_fraction=0.5, replay_decay_steps=4,
           anchor_weight=0.5, val_runs=3, val_k=2, name="toy-ddp")


def _launch(argv: list[str], home: Path) -> subprocess.CompletedProcess:
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PDBGYM_HOME": str(fresh_home(home)),
           "TRL_EXPERIMENTAL_SILENCE": "1"}
    result = subprocess.run([*LAUNCH, *argv], capture_output=True, text=True, timeout=500, env=env, cwd=REPO)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-6000:]
    return result


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _check_one_writer_and_agreeing_ranks(out: Path, steps: int, group: int, tasks_per_step: int) -> list[dict]:
    """Checks shared by both runs; returns rank 0's rows."""
    rows = _jsonl(out / "steps.jsonl")
    assert [r["step"] for r in rows] == list(range(1, steps + 1))  # each step once: one process writes
    ranks = [_jsonl(out / "ranks" / f"rank-{rank}.jsonl") for rank in (0, 1)]
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


@pytest.mark.slow
def test_toy_grpo_on_two_processes_splits_the_groups_and_keeps_the_ranks_in_step(tmp_path):
    from test_grpo_anchor_replay import _toy_corpus

    from pdbgym.adapters.store import Store
    from pdbgym.train.grpo.schedules import replayed_per_group

    model = make_toy_model(tmp_path / "toy-model")
    make_toy_tasks(tmp_path / "toy-tasks")
    make_toy_tasks(tmp_path / "val-tasks", count=1, prefix="toyval")
    _toy_corpus(tmp_path / "corpus", model)
    out = tmp_path / "run"
    _launch([str(Path(__file__).resolve()), str(out)], tmp_path / "home")
    ranks = _check_one_writer_and_agreeing_ranks(out, TOY["steps"], TOY["group"], TOY["tasks_per_step"])
    # the solve-rate curriculum grew from the solve rate of BOTH processes' groups, identically on each
    budget = TOY["budget_start"]
    for row in ranks:
        assert row["turn_budget"] == budget
        if row["solve_rate"] >= TOY["budget_threshold"]:
            budget = min(TOY["budget_end"], budget + TOY["budget_increment"])
        assert row["next_turn_budget"] == budget
    replayed = sum(sum(replayed_per_group(step, TOY["group"], TOY["tasks_per_step"], 0.5, 4)) for step in range(3))
    assert ranks[-1]["replayed_total"] == replayed > 0
    assert sum(ranks[-1]["replay_next"].values()) == replayed  # both ranks hold the rotation of all takes
    assert ranks[-1]["episodes_total"] == 3 * TOY["group"] * TOY["tasks_per_step"] - replayed
    # beta: every step moved by the leash on TRL's KL, reduced over processes (the toy's horizon: 5 steps)
    rows = _jsonl(out / "steps.jsonl")
    for before, after in zip(rows, rows[1:], strict=False):
        error = min(max(before["kl"] / 0.05 - 1, -0.2), 0.2)
        assert after["beta"] == pytest.approx(before["beta"] * (1 + error / 5), rel=1e-6)
    assert all(r["bc/nll"] > 0 for r in rows)
    # one gate per checkpoint, its 3 val episodes split over the processes (2 + 1) and gathered
    gates = _jsonl(out / "gates.jsonl")
    assert [g["checkpoint"] for g in gates] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert all(g["runs"] == 3 and sum(g["termination_reasons"].values()) == 3 for g in gates)
    # one registration; both processes returned the main one's record
    adapters = [n for n in Store(tmp_path / "store").all_nodes() if n["kind"] != "model"]
    records = [json.loads((out / f"record-{rank}.json").read_text()) for rank in (0, 1)]
    assert len(adapters) == 1 and records[0] == records[1] and records[0]["store_id"] == adapters[0]["id"]

    # A kill during the last save: checkpoint-3 is gone but step 3 was logged. Resumed on 2 processes, the
    # main one cuts steps.jsonl and both rank logs back to step 2, every process restores the recipe state
    # of checkpoint-2, and step 3 is played once more with the budget and beta it had.
    shutil.rmtree(out / "checkpoints" / "checkpoint-3")
    _launch([str(Path(__file__).resolve()), str(out), "--resume"], tmp_path / "home")
    again = _check_one_writer_and_agreeing_ranks(out, TOY["steps"], TOY["group"], TOY["tasks_per_step"])
    assert again[:2] == ranks[:2]  # the rows of the kept steps, untouched
    for key in ("turn_budget", "beta", "replayed_total", "replay_next"):
        assert again[2][key] == ranks[2][key], key


@pytest.mark.slow
def test_cli_grpo_on_two_processes_plays_real_episodes(tmp_path, tiny_model_dir):
    tasks = make_toy_tasks(tmp_path / "toy-tasks")
    val = make_toy_tasks(tmp_path / "val-tasks", count=1, prefix="toyval")
    out = tmp_path / "run"
    result = _launch(["-m", "pdbgym.cli", "train", "grpo", "--policy", str(tiny_model_dir), "--tasks", str(tasks),
             "--val-tasks", str(val), "--out", str(out), "--group", "2", "--tasks-per-step", "2", "--steps", "2",
             "--save-steps", "2", "--val-runs", "2", "--max-new-tokens", "4", "--max-context-tokens", "2048",
             "--curriculum", "fixed", "--budget-start", "1", "--budget-end", "1", "--device", "cpu",
             "--store", str(tmp_path / "store"), "--register-without-signal", "--json"], tmp_path / "home")
    _check_one_writer_and_agreeing_ranks(out, steps=2, group=2, tasks_per_step=2)
    assert result.stdout.count('"store_id"') == 1  # --json: one record printed, by the main process
    # a random model solves nothing (no reward spread), registered only because the flag asks for it
    from pdbgym.adapters.store import Store

    record = json.loads((out / "grpo_run.json").read_text())
    assert record["reward_signal_steps"] == 0 and record["registered"] and record["registered_without_signal"]
    assert "registered anyway" in record["warning"] and "not registered" not in record["warning"]  # one story
    assert [n["id"] for n in Store(tmp_path / "store").all_nodes() if n["kind"] != "model"] == [record["store_id"]]
    gates = _jsonl(out / "gates.jsonl")
    assert [g["checkpoint"] for g in gates] == ["checkpoint-2"] and gates[0]["runs"] == 2
    from pdbgym.adapters.store import Store

    assert len([n for n in Store(tmp_path / "store").all_nodes() if n["kind"] != "model"]) == 1


@pytest.mark.slow
def test_a_time_cap_stops_both_processes_at_the_same_step(tmp_path, tiny_model_dir):
    """--max-minutes under DDP: the processes agree (a collective) on the step to stop at; it is saved and gated."""
    tasks = make_toy_tasks(tmp_path / "toy-tasks")
    val = make_toy_tasks(tmp_path / "val-tasks", count=1, prefix="toyval")
    out = tmp_path / "run"
    _launch(["-m", "pdbgym.cli", "train", "grpo", "--policy", str(tiny_model_dir), "--tasks", str(tasks),
             "--val-tasks", str(val), "--out", str(out), "--group", "2", "--tasks-per-step", "2", "--steps", "5",
             "--save-steps", "5", "--val-runs", "2", "--max-new-tokens", "4", "--max-context-tokens", "2048",
             "--curriculum", "fixed", "--budget-start", "1", "--budget-end", "1", "--device", "cpu",
             "--store", str(tmp_path / "store"), "--register-without-signal", "--max-minutes", "0.0001"],
            tmp_path / "home")
    _check_one_writer_and_agreeing_ranks(out, steps=1, group=2, tasks_per_step=2)
    assert [g["checkpoint"] for g in _jsonl(out / "gates.jsonl")] == ["checkpoint-1"]
    assert json.loads((out / "grpo_run.json").read_text())["steps"] == 1


def test_groups_are_dealt_whole_to_the_processes():
    from pdbgym.errors import PdbgymError
    from pdbgym.train.grpo.config import GRPORunConfig
    from pdbgym.train.grpo.trainer import grpo_arguments, per_process_groups

    assert per_process_groups(4, 2) == 2 and per_process_groups(3, 1) == 3
    with pytest.raises(PdbgymError, match=r"--tasks-per-step 3 is not a multiple of the 2 training processes"):
        per_process_groups(3, 2)
    config = GRPORunConfig(policy="embedded", tasks="toy", out=Path("unused"), group=8, tasks_per_step=4)
    assert grpo_arguments(config, "cpu", processes=2).per_device_train_batch_size == 16  # 2 groups of 8
    assert grpo_arguments(config, "cpu", processes=1).per_device_train_batch_size == 32



def test_a_replay_pool_skips_what_the_other_processes_handed_out():
    from pdbgym.train.corpus.example import Example
    from pdbgym.train.grpo.data import ReplayPool

    examples = [Example("t", "d", 0, "test", True, [1, 2, first], [0, 1, 1]) for first in (7, 8, 9)]
    alone, rank0, rank1 = ReplayPool(examples), ReplayPool(examples), ReplayPool(examples)
    # one process takes 1 at a step, then 2; two processes take them 1 + 2 and sync after the step
    expected = [s.completion_ids for s in alone.take("t", 1) + alone.take("t", 2)]
    got = [s.completion_ids for s in rank0.take("t", 1)]
    rank1.skip({"t": 1})
    got += [s.completion_ids for s in rank1.take("t", 2)]
    rank0.skip({"t": 2})
    assert got == expected == [[2, 7], [2, 8], [2, 9]]
    assert [s.completion_ids for s in rank0.take("t", 1)] == [s.completion_ids for s in alone.take("t", 1)]
    rank0.skip({"unknown": 3})  # a task without solved examples: nothing to rotate

def main(out: Path, resume: bool) -> None:
    """One process of the toy run (launched twice by accelerate); writes what ``train_grpo`` returned."""
    import os

    import torch

    from pdbgym.fileio import write_json_atomic
    from pdbgym.train.grpo.run import train_grpo

    torch.set_num_threads(1)
    root = out.parent
    config = toy_config(out, root / "toy-model", root / "toy-tasks", val_tasks=str(root / "val-tasks"),
                        anchor_data=root / "corpus", replay_data=root / "corpus",
                        **{**TOY, "name": "toy-ddp-resumed" if resume else TOY["name"]}, resume=resume)
    record = train_grpo(config, play=toy_play)
    write_json_atomic(out / f"record-{os.environ['RANK']}.json", record)


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--resume" in sys.argv[2:])
