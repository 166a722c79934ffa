"""`pdbgym train grpo` on 2 DDP processes from the command line, playing real pdbgym episodes of the toy task
suite on both processes (the toy run and what must hold with N processes: test_grpo_ddp.py). A file of its
own so that the test workers (``--dist loadfile``) run these beside the toy run."""

from __future__ import annotations

import json

import pytest
from ddpfixtures import check_one_writer_and_agreeing_ranks, jsonl, launch
from grpo_toy import make_toy_tasks


@pytest.mark.slow
def test_cli_grpo_on_two_processes_plays_real_episodes(tmp_path, tiny_model_dir):
    tasks = make_toy_tasks(tmp_path / "toy-tasks")
    val = make_toy_tasks(tmp_path / "val-tasks", count=1, prefix="toyval")
    out = tmp_path / "run"
    result = launch(["-m", "pdbgym.cli", "train", "grpo", "--policy", str(tiny_model_dir), "--tasks", str(tasks),
             "--val-tasks", str(val), "--out", str(out), "--group", "2", "--tasks-per-step", "2", "--steps", "2",
             "--save-steps", "2", "--val-runs", "2", "--max-new-tokens", "4", "--max-context-tokens", "2048",
             "--curriculum", "fixed", "--budget-start", "1", "--budget-end", "1", "--device", "cpu",
             "--store", str(tmp_path / "store"), "--register-without-signal", "--json"], tmp_path / "home")
    check_one_writer_and_agreeing_ranks(out, steps=2, group=2, tasks_per_step=2)
    assert result.stdout.count('"store_id"') == 1  # --json: one record printed, by the main process
    # a random model solves nothing (no reward spread), registered only because the flag asks for it
    from pdbgym.adapters.store import Store

    record = json.loads((out / "grpo_run.json").read_text())
    assert record["reward_signal_steps"] == 0 and record["registered"] and record["registered_without_signal"]
    assert "registered anyway" in record["warning"] and "not registered" not in record["warning"]  # one story
    assert [n["id"] for n in Store(tmp_path / "store").all_nodes() if n["kind"] != "model"] == [record["store_id"]]
    gates = jsonl(out / "gates.jsonl")
    assert [g["checkpoint"] for g in gates] == ["checkpoint-2"] and gates[0]["runs"] == 2
    from pdbgym.adapters.store import Store

    assert len([n for n in Store(tmp_path / "store").all_nodes() if n["kind"] != "model"]) == 1


@pytest.mark.slow
def test_a_time_cap_stops_both_processes_at_the_same_step(tmp_path, tiny_model_dir):
    """--max-minutes under DDP: the processes agree (a collective) on the step to stop at; it is saved and gated."""
    tasks = make_toy_tasks(tmp_path / "toy-tasks")
    val = make_toy_tasks(tmp_path / "val-tasks", count=1, prefix="toyval")
    out = tmp_path / "run"
    launch(["-m", "pdbgym.cli", "train", "grpo", "--policy", str(tiny_model_dir), "--tasks", str(tasks),
             "--val-tasks", str(val), "--out", str(out), "--group", "2", "--tasks-per-step", "2", "--steps", "5",
             "--save-steps", "5", "--val-runs", "2", "--max-new-tokens", "4", "--max-context-tokens", "2048",
             "--curriculum", "fixed", "--budget-start", "1", "--budget-end", "1", "--device", "cpu",
             "--store", str(tmp_path / "store"), "--register-without-signal", "--max-minutes", "0.0001"],
            tmp_path / "home")
    check_one_writer_and_agreeing_ranks(out, steps=1, group=2, tasks_per_step=2)
    assert [g["checkpoint"] for g in jsonl(out / "gates.jsonl")] == ["checkpoint-1"]
    assert json.loads((out / "grpo_run.json").read_text())["steps"] == 1
