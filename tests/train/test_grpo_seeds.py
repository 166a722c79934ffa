"""GRPO's per-episode seeds: pdbgym.seeds keyed by task id, step, group and slot, and a seeded batched draw."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play  # noqa: E402

from pdbgym.seeds import episode_seed, grpo_episode_seed, grpo_run_index  # noqa: E402
from pdbgym.train.grpo.rollout import group_seeds, repeat_seeds  # noqa: E402


def test_every_episode_of_a_run_has_its_own_run_index():
    indexes = [grpo_run_index(step, group, slot, 4, 3) for step in range(5) for group in range(3) for slot in range(4)]
    assert indexes == list(range(5 * 3 * 4))
    with pytest.raises(ValueError, match="outside a step"):
        grpo_run_index(0, 3, 0, 4, 3)  # group 3 of a step of 3 groups
    with pytest.raises(ValueError, match="outside a step"):
        grpo_run_index(0, 0, 4, 4, 3)


def test_group_seeds_follow_the_batch_layout_and_the_process():
    prompts = ["a"] * 4 + ["b"] * 4  # two groups of 4 on this process
    seeds = group_seeds(9, prompts, range(8), step=2, group_size=4, groups_per_step=4, process_index=1)
    # process 1's groups are the step's groups 2 and 3 (process 0 plays 0 and 1)
    assert seeds[5] == grpo_episode_seed(9, "b", 2, 3, 1, 4, 4) == episode_seed(9, "b", (2 * 4 + 3) * 4 + 1)
    assert len(set(seeds)) == 8
    on_process_0 = group_seeds(9, prompts, range(8), step=2, group_size=4, groups_per_step=4, process_index=0)
    assert not set(seeds) & set(on_process_0)  # the same tasks on two processes draw differently
    assert group_seeds(9, prompts, [1, 6], 2, 4, 4, 1) == [seeds[1], seeds[6]]  # replayed slots keep theirs
    assert group_seeds(9, prompts, range(8), 3, 4, 4, 1) != seeds


def test_val_gate_seeds_are_runs_of_each_task():
    assert repeat_seeds(5, ["x", "x", "y", "x"]) == [episode_seed(5, "x", 0), episode_seed(5, "x", 1),
                                                      episode_seed(5, "y", 0), episode_seed(5, "x", 2)]


def test_a_seeded_batch_draws_alike_in_any_order_and_leaves_the_global_stream(tmp_path):
    """Rows seeded alike draw alike in any order and batch (the engine's draw keys on a row's own seed)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pdbgym.agent.backends.base import GenerationRequest, SamplingParams
    from pdbgym.train.grpo.rollout import BatchedGenerator

    folder = make_toy_model(tmp_path / "toy")
    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    generator = BatchedGenerator(model, tokenizer)
    prompt = tokenizer("w4 w8", add_special_tokens=False)["input_ids"]

    def requests(seeds):
        return [GenerationRequest(list(prompt), [], None, SamplingParams(1.0, 1.0, 6, s)) for s in seeds]

    seeds = [11, 12, 13, 14, 15, 16]
    torch.manual_seed(0)
    before = torch.get_rng_state()
    forward = generator.generate_batch(requests(seeds))
    assert torch.equal(torch.get_rng_state(), before)  # the trainer's own random stream is untouched
    backward = generator.generate_batch(requests(seeds[::-1]))[::-1]
    assert [g.token_ids for g in forward] == [g.token_ids for g in backward]
    for ahead, behind in zip(forward, backward, strict=True):
        assert ahead.logprobs == pytest.approx(behind.logprobs, abs=1e-5)
    other = generator.generate_batch(requests([21, 22, 23, 24, 25, 26]))
    assert [g.token_ids for g in other] != [g.token_ids for g in forward]  # 6 x 6 draws over 12 words
    unseeded = [generator.generate_batch(requests([None] * 6)) for _ in range(2)]
    assert [g.token_ids for g in unseeded[0]] != [g.token_ids for g in unseeded[1]]
    alone = [generator.generate_batch(requests([seed]))[0] for seed in seeds[:3]]
    assert [g.token_ids for g in alone] == [g.token_ids for g in forward[:3]]  # batch composition does not matter
    generator.close()


def test_train_grpo_hands_every_played_episode_its_seed(tmp_path, monkeypatch):
    from pdbgym.train.grpo.run import train_grpo

    monkeypatch.setenv("PDBGYM_HOME", str(tmp_path / "home"))
    model, tasks = make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks")
    val = make_toy_tasks(tmp_path / "val-tasks", count=1, prefix="val")
    handed: list[tuple[list[str], list[int] | None]] = []

    def play(batch, trainer, turn_budget, temperature, seeds=None):
        handed.append(([t.instance_id for t in batch], seeds))
        return toy_play(batch, trainer, turn_budget, temperature, seeds)

    config = toy_config(tmp_path / "run", model, tasks, steps=2, save_steps=2, group=4, tasks_per_step=2,
                        val_tasks=str(val), val_runs=2)
    train_grpo(config, play=play)
    training, gate = handed[:2], handed[2:]
    for step, (ids, seeds) in enumerate(training):
        assert seeds == group_seeds(7, ids, range(8), step, 4, 2)
        assert seeds == [grpo_episode_seed(7, ids[p], step, p // 4, p % 4, 4, 2) for p in range(8)]
    assert len({s for _, seeds in training for s in seeds}) == 16
    assert gate == [(["val__0", "val__0"], [episode_seed(7, "val__0", 0), episode_seed(7, "val__0", 1)])]
