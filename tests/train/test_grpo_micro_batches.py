"""A GRPO step's rows split into micro-batches (``update_micro_batches``): each a forward and a backward, their
gradients accumulated into one optimizer step. The same episodes give the same loss and the same weights
as one batch, the BC anchor counted once a step; a count that does not divide the rows is refused."""

import json
import sys
from pathlib import Path

import pytest
from homefixtures import fresh_home

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play  # noqa: E402
from test_grpo_anchor_replay import _toy_corpus  # noqa: E402


def _run(root: Path, model: Path, tasks: Path, corpus: Path, micro: int, monkeypatch) -> tuple[list[dict], dict]:
    import torch
    from safetensors.torch import load_file

    from pdbgym.train.grpo import trainer
    from pdbgym.train.grpo.run import train_grpo

    scored, real = [], trainer.grouped_scores

    def spy(score, input_ids, *rest, **named):  # the rows of each policy forward (under gradient)
        if torch.is_grad_enabled():
            scored.append(input_ids.size(0))
        return real(score, input_ids, *rest, **named)

    monkeypatch.setattr(trainer, "grouped_scores", spy)

    out = root / f"run-{micro}"
    # group 8 x 2 tasks: 16 rows a step; the anchor and a fixed KL weight, so every term of the loss is in play
    train_grpo(toy_config(out, model, tasks, steps=2, save_steps=2, name=f"toy-micro-{micro}", anchor_data=corpus,
                          anchor_weight=0.5, update_micro_batches=micro), play=toy_play)
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert scored == [16 // micro] * (2 * micro)  # each step's 16 rows in `micro` forwards
    return rows, load_file(str(out / "checkpoints" / "checkpoint-2" / "adapter_model.safetensors"))


def test_micro_batches_give_one_batchs_loss_and_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    model, tasks = make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks")
    corpus = _toy_corpus(tmp_path / "corpus", model)
    whole_rows, whole = _run(tmp_path, model, tasks, corpus, 1, monkeypatch)
    for micro in (2, 4):
        rows, weights = _run(tmp_path, model, tasks, corpus, micro, monkeypatch)
        for one, split in zip(whole_rows, rows, strict=True):
            assert split["reward"] == one["reward"]  # the same episodes (seeded draws)
            assert split["loss"] == pytest.approx(one["loss"], rel=1e-4, abs=1e-6), micro
            assert split["bc/nll"] == pytest.approx(one["bc/nll"], rel=1e-5)  # the anchor taken once a step
            assert split["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4), micro
        assert weights.keys() == whole.keys()
        for name, value in whole.items():
            assert float((weights[name] - value).abs().max()) < 1e-4, (micro, name)
    moved = max(float(v.abs().max()) for k, v in whole.items() if "lora_B" in k)
    assert moved > 1e-3  # the steps trained: equal weights are not two untouched adapters


def test_a_count_that_does_not_divide_the_rows_is_refused_with_the_counts_that_do(tmp_path):
    from pdbgym.episode_defaults import SettingsError
    from pdbgym.errors import PdbgymError
    from pdbgym.train.grpo.trainer import grpo_arguments

    config = toy_config(tmp_path / "run", tmp_path, tmp_path, steps=1, update_micro_batches=3)
    with pytest.raises(PdbgymError, match=r"--update-micro-batches 3 does not divide the 16 episodes.*\[1, 2, 4, 8, 16\]"):
        grpo_arguments(config, "cpu")
    arguments = grpo_arguments(toy_config(tmp_path / "run", tmp_path, tmp_path, steps=1, update_micro_batches=4), "cpu")
    assert (arguments.per_device_train_batch_size, arguments.gradient_accumulation_steps,
            arguments.steps_per_generation) == (4, 4, 4)
    with pytest.raises(SettingsError, match="update_micro_batches must be a whole number >= 1"):
        toy_config(tmp_path / "run", tmp_path, tmp_path, steps=1, update_micro_batches=0)
