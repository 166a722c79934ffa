"""A test per seam of pdbgym/train/seams.py: each non-public library member pdbgym uses exists in the
installed TRL/transformers and does what pdbgym relies on, and a release without it is refused by name.

The trainer is a real TRL ``SFTTrainer`` over the tiny random Llama (one or two optimizer steps on CPU).
"""

from __future__ import annotations

import pytest
import torch

from pdbgym.train import seams


@pytest.fixture
def trainer(tmp_path, tiny_model_dir, smol_tokenizer):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig, SFTTrainer

    rows = [{"messages": [{"role": "user", "content": f"fix bug {i}"},
                          {"role": "assistant", "content": f"patched line {i}"}]} for i in range(4)]
    args = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=2, save_steps=1,
                     logging_steps=1, report_to=[], use_cpu=True, learning_rate=5e-2, disable_tqdm=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    return SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=smol_tokenizer)


def _weights(model) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def test_the_installed_libraries_have_every_class_level_seam():
    seams.check_all()


def test_an_override_of_a_method_the_base_no_longer_has_is_refused_by_name():
    class Renamed:  # a trainer release that renamed the checkpoint hook
        def _save_checkpoint_v2(self, model, trial): ...

    class Reordered:
        def _save_checkpoint(self, trial, model): ...

    with pytest.raises(seams.SeamError, match=r"Renamed\._save_checkpoint.*transformers \d"):
        seams.require_method(Renamed, "_save_checkpoint", ("model", "trial"))
    with pytest.raises(seams.SeamError, match=r"found _save_checkpoint\('trial', 'model'\)"):
        seams.require_method(Reordered, "_save_checkpoint", ("model", "trial"))


def test_checkpoint_hook_and_output_folder_are_where_transformers_saves(trainer, tmp_path):
    base = seams.grpo_trainer_base()
    saved: list[str] = []

    class Probe(type(trainer)):  # the same override pattern as PdbgymGRPOTrainer, on the SFT trainer
        def _save_checkpoint(self, model, trial):
            saved.append(seams.checkpoint_folder(self, trial))
            super()._save_checkpoint(model, trial)

    assert base.__name__ == "GRPOTrainer"
    trainer.__class__ = Probe
    trainer.train()
    assert saved == [str(tmp_path / "out")] * 2  # called at each save, naming the folder checkpoint-N goes in
    assert sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]


def test_metrics_appended_through_the_seam_are_logged_with_the_trainers_own(trainer):
    seams.append_metric(trainer, "time/rollout_s", 2.0)
    seams.append_metric(trainer, "time/rollout_s", 4.0)
    trainer.model.train()
    trainer.log({"loss": 1.0})
    row = trainer.state.log_history[-1]
    assert row["loss"] == 1.0 and row["time/rollout_s"] == pytest.approx(3.0)  # averaged by TRL
    assert not seams.metrics_buffer(trainer).get("time/rollout_s")  # and cleared for the next step


def test_the_token_counter_continues_from_the_value_set(trainer):
    seams.set_token_count(trainer, 1_000_000)
    trainer.args.max_steps = 1
    trainer.train()
    counts = [row["num_tokens"] for row in trainer.state.log_history if "num_tokens" in row]
    assert counts and counts[0] > 1_000_000  # without the seam it would count from 0


def test_checkpoint_and_best_model_loads_restore_the_saved_weights(trainer, tmp_path):
    trainer.train()
    checkpoint = str(tmp_path / "out" / "checkpoint-1")
    trained = _weights(trainer.model)
    seams.load_checkpoint_weights(trainer, checkpoint)
    at_one = _weights(trainer.model)
    assert any(not torch.equal(at_one[k], trained[k]) for k in trained)  # step 1's weights, not step 2's
    with torch.no_grad():
        for parameter in trainer.model.parameters():
            parameter.add_(1.0)
    trainer.state.best_model_checkpoint = checkpoint
    seams.load_best_model(trainer)
    assert all(torch.equal(value, at_one[k]) for k, value in _weights(trainer.model).items())


def test_generation_unwrap_yields_the_live_policy(trainer, smol_tokenizer):
    with seams.unwrapped_for_generation(trainer) as model:
        assert model is trainer.model  # one process, no wrapper: the very weights being trained
        ids = smol_tokenizer("def f():", return_tensors="pt").input_ids
        out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 3


def test_tensorboard_writer_goes_to_the_folder_with_the_purge_step(tmp_path, trainer):
    pytest.importorskip("tensorboard")
    callback = seams.tensorboard_callback_class(str(tmp_path / "tb"), 5)()
    callback._init_summary_writer(trainer.args)
    assert callback.tb_writer.log_dir == str(tmp_path / "tb")
    callback.tb_writer.add_scalar("train/loss", 1.0, 6)
    callback.tb_writer.close()
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))


def test_instance_seams_missing_on_an_object_are_refused_by_name():
    class Bare:
        pass

    for call in (lambda: seams.metrics_buffer(Bare()), lambda: seams.set_token_count(Bare(), 1),
                 lambda: seams.load_checkpoint_weights(Bare(), "x"), lambda: seams.load_best_model(Bare())):
        with pytest.raises(seams.SeamError, match="Bare"):
            call()
