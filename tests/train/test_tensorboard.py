"""`--tensorboard`: SFT and GRPO write event files to OUT/tensorboard holding the metrics they log, read
back with TensorBoard's own EventAccumulator (the resume case is in test_sft_resume)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from homefixtures import fresh_home
from recordfixtures import episode_record, write_records

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play  # noqa: E402

from pdbgym.train.corpus.build import CorpusConfig, build_corpus  # noqa: E402


def _scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sft_event_file_holds_train_and_eval_loss_per_step(tmp_path, smol_tokenizer, tiny_model_dir):
    from pdbgym.train.sft.config import SFTTrainConfig
    from pdbgym.train.sft.trainer import train_sft

    records = [episode_record(smol_tokenizer, f"task{t}", [("b calc.py:3", f"out {t}"), ("submit", "ok")], sample_idx=s)
               for t in range(4) for s in range(2)]
    build_corpus(CorpusConfig(caches=[write_records(tmp_path / "cache", records)], out=tmp_path / "corpus"))
    config = SFTTrainConfig(base=str(tiny_model_dir), data=tmp_path / "corpus", out=tmp_path / "sft", rank=4, lr=3e-2,
                            effective_batch=2, max_steps=4, eval_steps=2, val_fraction=0.25, device="cpu",
                            register=False, tensorboard=True, ledger=tmp_path / "ledger.jsonl")
    train_sft(config)
    assert len(list((config.out / "tensorboard").glob("events.out.tfevents.*"))) == 1
    assert not (config.out / "checkpoints" / "runs").exists()  # not transformers' default folder
    scalars = _scalars(config.out / "tensorboard")
    rows = _rows(config.out / "metrics.jsonl")
    for tag, key in (("train/loss", "loss"), ("eval/loss", "eval_loss"), ("train/learning_rate", "learning_rate")):
        logged = [(r["step"], r[key]) for r in rows if key in r]
        assert [s for s, _ in scalars[tag]] == [s for s, _ in logged] and len(logged) >= 2
        assert [v for _, v in scalars[tag]] == pytest.approx([v for _, v in logged], rel=1e-6)  # float32 in events


def test_sft_without_the_flag_writes_no_event_file(tmp_path, smol_tokenizer, tiny_model_dir):
    from pdbgym.train.sft.config import SFTTrainConfig
    from pdbgym.train.sft.trainer import train_sft

    records = [episode_record(smol_tokenizer, "t0", [("submit", "ok")])]
    build_corpus(CorpusConfig(caches=[write_records(tmp_path / "cache", records)], out=tmp_path / "corpus"))
    out = tmp_path / "sft"
    train_sft(SFTTrainConfig(base=str(tiny_model_dir), data=tmp_path / "corpus", out=out, rank=2, max_steps=1,
                             effective_batch=1, val_fraction=0.0, device="cpu", register=False))
    assert not (out / "tensorboard").exists() and not list(out.rglob("events.out.tfevents.*"))


def test_grpo_event_file_holds_reward_kl_beta_and_turn_budget(tmp_path, monkeypatch):
    from pdbgym.train.grpo.run import train_grpo

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    model, tasks = make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks")
    out = tmp_path / "run"
    train_grpo(toy_config(out, model, tasks, steps=2, save_steps=2, tensorboard=True, name="toy-tb"), play=toy_play)
    scalars = _scalars(out / "tensorboard")
    rows = _rows(out / "steps.jsonl")
    for key in ("reward", "kl", "beta", "turn_budget"):
        per_step: dict[int, float] = {}
        for step, value in scalars[f"train/{key}"]:  # beta and turn_budget also ride on the end-of-run summary
            per_step.setdefault(step, value)
        assert sorted(per_step) == [r["step"] for r in rows] == [1, 2], key
        assert [per_step[r["step"]] for r in rows] == pytest.approx([r[key] for r in rows], rel=1e-6, abs=1e-9), key
    assert any(r["kl"] > 0 for r in rows)  # a real KL went through, not only the zero of the first step
    assert not (out / "checkpoints" / "runs").exists()
