"""`pdbgym train corpus` and `pdbgym train sft` from the command line: flags reach the library."""

from __future__ import annotations

import json

from recordfixtures import episode_record, write_records
from typer.testing import CliRunner

from pdbgym.train.commands import app


def test_corpus_then_sft_from_the_command_line(tmp_path, smol_tokenizer, tiny_model_dir):
    records = [episode_record(smol_tokenizer, f"t{i}", [("b calc.py:3", "Breakpoint"), ("submit", f"graded {i}")])
               for i in range(2)]
    cache = write_records(tmp_path / "cache", records)
    run = CliRunner().invoke(app, ["corpus", "--cache", str(cache), "--out", str(tmp_path / "corpus"),
                                   "--solved-only", "--max-length", "4096"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["examples_kept"] == 2
    run = CliRunner().invoke(app, ["sft", "--base", str(tiny_model_dir), "--data", str(tmp_path / "corpus"),
                                   "--out", str(tmp_path / "sft"), "--lora", "--rank", "2", "--max-steps", "1",
                                   "--effective-batch", "1", "--val-fraction", "0", "--store", str(tmp_path / "store"),
                                   "--device", "cpu"])
    assert run.exit_code == 0, run.output
    result = json.loads(run.output[run.output.index("{"):])
    assert result["steps"] == 1 and result["name"] == "sft" and result["tensor_count"] == 8  # LoRA: A and B
    recipe = json.loads((tmp_path / "sft" / "adapter" / "pdbgym_train.json").read_text())["recipe"]
    assert recipe["use_dora"] is False and recipe["rank"] == 2 and recipe["lora_alpha"] == 4


def test_refusals_are_named_errors(tmp_path, smol_tokenizer):
    splits = tmp_path / "splits.json"
    splits.write_text(json.dumps({"splits": {"test": [{"instance_id": "t0"}]}}))
    cache = write_records(tmp_path / "cache", [episode_record(smol_tokenizer, "t0", [("submit", "ok")])])
    run = CliRunner().invoke(app, ["corpus", "--cache", str(cache), "--out", str(tmp_path / "c"), "--splits", str(splits)])
    assert run.exit_code != 0 and "t0 (test)" in str(run.exception)


def test_shipped_accelerate_configs_load_with_accelerate():
    from pathlib import Path

    from accelerate.commands.config.config_args import load_config_from_file

    import pdbgym.train

    folder = Path(pdbgym.train.__file__).parent / "configs"
    kinds = {path.stem: load_config_from_file(str(path)).distributed_type for path in sorted(folder.glob("*.yaml"))}
    assert {name: str(kind).split(".")[-1] for name, kind in kinds.items()} == {
        "ddp": "MULTI_GPU", "fsdp": "FSDP", "zero2": "DEEPSPEED", "zero3": "DEEPSPEED"}


def test_every_sft_config_field_is_a_flag_with_the_fields_help():
    """``train sft``'s flags are SFTTrainConfig's fields, help and default declared once on the field."""
    import dataclasses

    import typer

    from pdbgym.train.sft.config import SFTTrainConfig

    options = {option.name: option for option in typer.main.get_command(app).commands["sft"].params}
    flags = {"use_dora": "lora"}  # --lora sets use_dora False
    fields = [spec for spec in dataclasses.fields(SFTTrainConfig) if spec.name != "extra"]
    for spec in fields:
        option = options[flags.get(spec.name, spec.name)]
        assert option.help == spec.metadata["help"] and not option.hidden, spec.name
    assert {flags.get(spec.name, spec.name) for spec in fields} == set(options)  # nothing else
    assert options["target_modules"].default == "q_proj,k_proj,v_proj,o_proj"
    assert [options[name].secondary_opts for name in ("lora", "resume", "restart")] == [[], [], []]


def test_sft_flags_make_the_config(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from pdbgym.train.sft import trainer
    from pdbgym.train.sft.config import SFTTrainConfig

    made = []

    def train_sft(config, on_log):
        made.append(config)
        return SimpleNamespace(adapter_dir=tmp_path, node_id=None, name="n", parent_id=None, best_val_loss=None,
                               best_step=None, steps=0, tensor_count=0, report=None)

    monkeypatch.setattr(trainer, "train_sft", train_sft)
    base = ["sft", "--base", "embedded", "--data", str(tmp_path / "corpus"), "--out", str(tmp_path / "run")]
    assert CliRunner().invoke(app, base).exit_code == 0
    assert made.pop() == SFTTrainConfig("embedded", tmp_path / "corpus", tmp_path / "run")
    run = CliRunner().invoke(app, [*base, "--lora", "--target-modules", "q_proj,,v_proj", "--resume", "--rank", "8",
                                   "--ledger", str(tmp_path / "ledger.jsonl")])
    assert run.exit_code == 0, run.output
    assert made.pop() == SFTTrainConfig("embedded", tmp_path / "corpus", tmp_path / "run", use_dora=False,
                                        target_modules=("q_proj", "v_proj"), resume=True, rank=8,
                                        ledger=tmp_path / "ledger.jsonl")
