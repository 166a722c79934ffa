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
runs, playing real pdbgym episodes of the toy task suite on both processes, are in test_grpo_ddp_cli.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

# This file also runs as a script under accelerate (main below), where tests/ is not on sys.path.
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from ddpfixtures import check_one_writer_and_agreeing_ranks, jsonl, launch  # noqa: E402
from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play  # noqa: E402

TOY = dict(group=4, tasks_per_step=2, steps=3, save_steps=1, curriculum="solve_rate", budget_start=2,
           budget_end=9, budget_threshold=0.5, budget_increment=1, replay_fraction=0.5, replay_decay_steps=4,
           anchor_weight=0.5, val_runs=3, val_k=2, name="toy-ddp")


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
    launch([str(Path(__file__).resolve()), str(out)], tmp_path / "home")
    ranks = check_one_writer_and_agreeing_ranks(out, TOY["steps"], TOY["group"], TOY["tasks_per_step"])
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
    rows = jsonl(out / "steps.jsonl")
    for before, after in zip(rows, rows[1:], strict=False):
        error = min(max(before["kl"] / 0.05 - 1, -0.2), 0.2)
        assert after["beta"] == pytest.approx(before["beta"] * (1 + error / 5), rel=1e-6)
    assert all(r["bc/nll"] > 0 for r in rows)
    # one gate per checkpoint, its 3 val episodes split over the processes (2 + 1) and gathered
    gates = jsonl(out / "gates.jsonl")
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
    launch([str(Path(__file__).resolve()), str(out), "--resume"], tmp_path / "home")
    again = check_one_writer_and_agreeing_ranks(out, TOY["steps"], TOY["group"], TOY["tasks_per_step"])
    assert again[:2] == ranks[:2]  # the rows of the kept steps, untouched
    for key in ("turn_budget", "beta", "replayed_total", "replay_next"):
        assert again[2][key] == ranks[2][key], key


@pytest.mark.slow
def test_micro_batches_on_two_processes_give_one_batchs_weights(tmp_path):
    """Each process splits its 4 rows into 2 passes; DDP reduces the gradients once the step's passes are in.
    The weights after two steps match the run that takes each process's rows in one pass."""
    from safetensors.torch import load_file
    from test_grpo_anchor_replay import _toy_corpus

    model = make_toy_model(tmp_path / "toy-model")
    make_toy_tasks(tmp_path / "toy-tasks")
    make_toy_tasks(tmp_path / "val-tasks", count=1, prefix="toyval")
    _toy_corpus(tmp_path / "corpus", model)
    weights, rows = {}, {}
    for micro in (1, 2):
        out = tmp_path / f"run-{micro}"
        launch([str(Path(__file__).resolve()), str(out), "--micro", str(micro)], tmp_path / f"home-{micro}")
        weights[micro] = load_file(str(out / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors"))
        rows[micro] = jsonl(out / "steps.jsonl")
    assert [r["reward"] for r in rows[2]] == [r["reward"] for r in rows[1]]  # the same episodes
    for one, split in zip(rows[1], rows[2], strict=True):
        assert split["loss"] == pytest.approx(one["loss"], rel=1e-4, abs=1e-6)
    for name, value in weights[1].items():
        assert float((weights[2][name] - value).abs().max()) < 1e-4, name
    assert max(float(v.abs().max()) for k, v in weights[1].items() if "lora_B" in k) > 1e-3  # it trained


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

def main(out: Path, resume: bool, micro: int | None = None) -> None:
    """One process of the toy run (launched twice by accelerate); writes what ``train_grpo`` returned. With
    ``micro``: two steps, the update in that many passes a process, no val gate."""
    import os

    import torch

    from pdbgym.fileio import write_json_atomic
    from pdbgym.train.grpo.run import train_grpo

    torch.set_num_threads(1)
    root = out.parent
    settings = {**TOY, "name": "toy-ddp-resumed" if resume else TOY["name"]}
    if micro is not None:
        settings.update(steps=2, save_steps=2, curriculum="fixed", name=f"toy-ddp-micro-{micro}",
                        update_micro_batches=micro)
    config = toy_config(out, root / "toy-model", root / "toy-tasks",
                        val_tasks=None if micro is not None else str(root / "val-tasks"),
                        anchor_data=root / "corpus", replay_data=root / "corpus", **settings, resume=resume)
    record = train_grpo(config, play=toy_play)
    write_json_atomic(out / f"record-{os.environ['RANK']}.json", record)


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--resume" in sys.argv[2:],
         int(sys.argv[sys.argv.index("--micro") + 1]) if "--micro" in sys.argv else None)
