"""SFT through TRL on a tiny in-process model: loss falls, only loss_mask ids carry gradient, the adapter
is registered with its parent, accepted by `pdbgym adapters accept`, and its choice is in the ledger."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from recordfixtures import episode_record, write_records

from pdbgym.train.corpus.build import CorpusConfig, CorpusError, build_corpus
from pdbgym.train.sft.config import SFTTrainConfig

COMMANDS = ["b calc.py:3", "p a, b", "view calc.py 1 9", "edit calc.py 3 3 return a - b", "run_tests", "submit"]


def _records(tokenizer, tasks: int = 4, samples: int = 2):
    records = []
    for task in range(tasks):
        for sample in range(samples):
            turns = [(COMMANDS[(task + sample + i) % len(COMMANDS)], f"output {task} {i}") for i in range(3)]
            records.append(episode_record(tokenizer, f"task{task}", turns, sample_idx=sample))
    return records


def _config(root, base, **options) -> SFTTrainConfig:
    values = dict(base=str(base), data=root / "corpus", out=root / "sft", rank=4, lr=3e-2, effective_batch=2,
                  max_steps=8, eval_steps=2, val_fraction=0.25, store=root / "store", ledger=root / "ledger.jsonl",
                  name="unit-sft")
    values.update(options)
    return SFTTrainConfig(**values)


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, smol_tokenizer, tiny_model_dir):
    from pdbgym.train.sft.trainer import train_sft

    root = tmp_path_factory.mktemp("sft")
    build_corpus(CorpusConfig(caches=[write_records(root / "cache", _records(smol_tokenizer))], out=root / "corpus"))
    config = _config(root, tiny_model_dir, report=True)
    return config, train_sft(config)


def test_training_loss_and_validation_loss_fall(sft_run):
    _, result = sft_run
    losses = [row["loss"] for row in result.history if "loss" in row]
    evals = [row["eval_loss"] for row in result.history if "eval_loss" in row]
    assert len(losses) == 8 and len(evals) == 4
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2 - 0.05
    assert evals[-1] < evals[0]
    assert result.best_val_loss == min(evals) and result.steps == 8
    assert result.report is not None and result.report.is_file()
    assert (result.out / "train_loss.png").is_file()


def test_adapter_is_registered_with_its_parent_and_recipe(sft_run, tiny_model_dir):
    from pdbgym.adapters.fingerprint import weights_hash
    from pdbgym.adapters.store import Store

    config, result = sft_run
    store = Store(config.store)
    node = store.get(store.resolve("unit-sft"))
    assert node["id"] == result.node_id and node["parent"] == weights_hash(tiny_model_dir)
    assert store.get(node["parent"])["kind"] == "model"
    record = json.loads((result.adapter_dir / "pdbgym_train.json").read_text())
    corpus_hash = json.loads((config.data / "corpus.json").read_text())["content_hash"]
    assert node["recipe"]["corpus_hash"] == record["recipe"]["corpus_hash"] == corpus_hash
    assert record["recipe"]["seed"] == 42 and record["recipe"]["rank"] == 4 and record["recipe"]["use_dora"]
    assert record["base"]["tokenizer_fingerprint"] == record["base"]["tokenizer_fingerprint"] is not None
    assert record["base"]["parent_id"] == node["parent"]
    # 1 layer x 4 attention projections x (lora_A, lora_B, DoRA magnitude)
    assert result.tensor_count == node["adapter"]["tensor_count"] == 12


def test_adapters_accept_passes_on_the_output(sft_run, tmp_path):
    from typer.testing import CliRunner

    from pdbgym.adapters.commands import app

    _, result = sft_run
    targets = tmp_path / "targets.json"
    targets.write_text(json.dumps({"lora_tensor_count": 12, "best_val_loss": result.best_val_loss,
                                   "best_step": result.best_step, "total_steps": 8, "rank": 4, "use_dora": True}))
    run = CliRunner().invoke(app, ["accept", str(result.adapter_dir), "--targets", str(targets), "--json"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["accepted"] is True
    targets.write_text(json.dumps({"lora_tensor_count": 432, "best_val_loss": 0.11644, "best_step": 156}))
    rejected = CliRunner().invoke(app, ["accept", str(result.adapter_dir), "--targets", str(targets), "--json"])
    assert json.loads(rejected.output)["accepted"] is False


def test_best_checkpoint_choice_is_a_ledger_selection_on_the_held_out_tasks(sft_run):
    from pdbgym.evaluate.selection import SelectionLedger, check_reportable, task_set_id

    config, result = sft_run
    record = json.loads((result.adapter_dir / "pdbgym_train.json").read_text())
    val_tasks = record["corpus"]["val_tasks"]
    assert len(val_tasks) == 1 and record["corpus"]["examples_val"] == 2
    (selection,) = SelectionLedger(config.ledger).entries()
    assert selection.chosen == "unit-sft" and selection.task_set == task_set_id(val_tasks)
    assert len(selection.candidates) == 4 and selection.scores["unit-sft"] == -result.best_val_loss
    with pytest.raises(Exception, match="selected checkpoint on its selection set"):
        check_reportable(["unit-sft"], val_tasks, force=False, ledger=SelectionLedger(config.ledger))


def test_only_loss_mask_ids_carry_gradient(tmp_path, smol_tokenizer, tiny_model_dir):
    """Gradients from the trainer's own prepared batch and loss: the head's input at every position whose
    next id has mask 0 gets exactly zero gradient, and perturbing tool-output ids that are only ever targets (the final
    observation) leaves every parameter gradient bit-identical; perturbing a generated id does not."""
    import torch

    from pdbgym.modelload import pick_device
    from pdbgym.train.corpus.build import load_corpus
    from pdbgym.train.sft.base import resolve_base
    from pdbgym.train.sft.trainer import build_trainer, prepare_examples

    record = episode_record(smol_tokenizer, "t1", [("b calc.py:3", "Breakpoint 1"), ("submit", "graded: all pass")])
    write_records(tmp_path / "cache", [record])
    build_corpus(CorpusConfig(caches=[tmp_path / "cache"], out=tmp_path / "corpus"))
    config = _config(tmp_path, tiny_model_dir, val_fraction=0.0, register=False)
    from pdbgym.adapters.store import Store

    base = resolve_base(config.base, Store(config.store), pick_device("cpu"))
    rows = prepare_examples(load_corpus(config.data).examples, 0)
    trainer = build_trainer(config, base, rows, [], "cpu")
    prepared = trainer.train_dataset[0]
    mask = [0] * record.prompt_len + record.loss_mask
    assert prepared["input_ids"] == record.tokens
    assert prepared["labels"] == [t if m else -100 for t, m in zip(record.tokens, mask, strict=True)]

    def gradients(input_ids):
        example = {"input_ids": input_ids, "labels": [t if m else -100 for t, m in zip(input_ids, mask, strict=True)]}
        batch = trainer.data_collator([example])
        captured = {}
        # TRL's loss runs a fused lm_head (no full logits): the final norm's output is what the head reads,
        # one row per position, so its gradient row t is the head's gradient at t
        final_norm = next(m for n, m in trainer.model.named_modules() if n.endswith("model.norm"))

        def keep_gradient(module, inputs, output) -> None:
            output.register_hook(lambda grad: captured.update(g=grad))

        handle = final_norm.register_forward_hook(keep_gradient)
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        handle.remove()
        params = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
        return captured["g"][0], params

    head_grad, reference = gradients(record.tokens)
    row_is_zero = (head_grad == 0).all(dim=-1).tolist()
    # row t predicts id t + 1: zero exactly when that id is not a loss id
    assert row_is_zero[:-1] == [m == 0 for m in mask[1:]] and row_is_zero[-1]
    last_generated = max(i for i, m in enumerate(mask) if m)
    tail = range(last_generated + 1, len(mask))
    assert len(tail) > 5 and all(mask[i] == 0 for i in tail)
    perturbed = list(record.tokens)
    for i in tail:
        perturbed[i] = (perturbed[i] + 97) % len(smol_tokenizer)
    _, after_tool_change = gradients(perturbed)
    assert all(torch.equal(reference[n], after_tool_change[n]) for n in reference)
    changed_generated = list(record.tokens)
    changed_generated[last_generated - 1] = (changed_generated[last_generated - 1] + 97) % len(smol_tokenizer)
    _, after_model_change = gradients(changed_generated)
    assert not all(torch.equal(reference[n], after_model_change[n]) for n in reference)


def test_a_corpus_of_another_tokenizer_is_refused_before_training(tmp_path, tiny_model_dir):
    from pdbgym.agent.backends.base import tokenizer_info
    from pdbgym.rollouts.record import RolloutRecord
    from pdbgym.train.sft.trainer import train_sft

    from modelfixtures import word_tokenizer

    words = word_tokenizer(64)
    record = RolloutRecord("t1", "unit", list(range(2, 30)), 8, 20, [1, 0] * 10, [0.0] * 20,
                           metadata={"tokenizer": tokenizer_info(words)})
    build_corpus(CorpusConfig(caches=[write_records(tmp_path / "cache", [record])], out=tmp_path / "corpus"))
    with pytest.raises(CorpusError, match="fingerprint"):
        train_sft(_config(tmp_path, tiny_model_dir))
    assert not (tmp_path / "sft" / "adapter").exists()


def test_a_store_reference_is_a_base_and_a_broken_chain_is_refused(sft_run, tmp_path):
    from pdbgym.adapters.errors import LineageError
    from pdbgym.adapters.stacked import load_stacked_model
    from pdbgym.adapters.store import Store
    from pdbgym.train.sft.trainer import train_sft

    config, first = sft_run
    second = train_sft(replace(config, base="unit-sft", out=tmp_path / "sft2", name="unit-sft-2", max_steps=2,
                               val_fraction=0.0, report=False))
    store = Store(config.store)
    assert store.get(second.node_id)["parent"] == first.node_id
    stacked = load_stacked_model("unit-sft-2", store)
    assert stacked.chain == [store.get(first.node_id)["parent"], first.node_id, second.node_id]
    weights = store.object_dir(first.node_id) / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    with pytest.raises(LineageError, match="missing or changed"):
        load_stacked_model("unit-sft-2", store)
