"""Optimizer steps whose gradients are not finite are skipped (``pdbgym.train.gradguard``), in real SFT and
GRPO runs through TRL: a backward that turns NaN while the forward stays finite (what an H100 GRPO run
hit at step 11) leaves the weights and the optimizer's moments as they were, the step is logged and
recorded with the tensors it reached, and steps that keep failing stop the run."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from homefixtures import fresh_home
from recordfixtures import write_records
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grpo_toy import make_toy_model, make_toy_tasks, toy_config, toy_play  # noqa: E402
from test_sft import _config, _records  # noqa: E402

from pdbgym.train.gradguard import SKIPPED_KEY  # noqa: E402


@contextmanager
def nan_backward(armed: Callable[[int], bool]) -> Iterator[None]:
    """In the n-th forward with gradients of any Llama (n from 1) for which ``armed(n)``, the first decoder
    layer's MLP output passes a NaN gradient back: the forward and the loss stay finite, and every
    gradient below that point (layer 0's and the embeddings') is NaN, as an overflow in a backward gives."""
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    state = {"n": 0, "armed": False}

    def count(module, args):
        if type(module).__name__ == "LlamaModel" and torch.is_grad_enabled() and module.training:
            state["n"] += 1
            state["armed"] = armed(state["n"])

    def poison(module, args, output):
        if type(module).__name__ == "LlamaMLP" and state["armed"] and output.requires_grad:
            state["armed"] = False  # the first layer's MLP only
            output.register_hook(lambda grad: torch.full_like(grad, float("nan")))

    handles = [register_module_forward_pre_hook(count), register_module_forward_hook(poison)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _finite(folder: Path) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_file(str(folder / "adapter_model.safetensors")).values())


def test_sft_skips_each_step_whose_gradients_are_nan_and_stops_after_three_in_a_row(
        tmp_path, smol_tokenizer, tiny_model_dir, caplog):
    from pdbgym.train.corpus.build import CorpusConfig, build_corpus
    from pdbgym.train.sft.trainer import train_sft

    build_corpus(CorpusConfig(caches=[write_records(tmp_path / "cache", _records(smol_tokenizer))],
                              out=tmp_path / "corpus"))
    config = _config(tmp_path, tiny_model_dir, val_fraction=0.0, eval_steps=100)  # 2 forwards a step
    # step 2 fails alone (forward 3), then steps 4, 5 and 6 (forwards 7 to 12) fail in a row
    with caplog.at_level(logging.WARNING, logger="pdbgym.train.gradguard"), nan_backward(lambda n: n in (3, *range(7, 13))):
        result = train_sft(config)
    rows = [row for row in result.history if "grad_norm" in row]
    assert [row["step"] for row in rows] == [1, 2, 3, 4, 5, 6]  # stopped at step 6 of 8
    assert [row[SKIPPED_KEY] for row in rows] == [0.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    assert all(row["grad_norm"] != row["grad_norm"] for row in rows if row[SKIPPED_KEY])  # logged as NaN
    assert all(row["loss"] == row["loss"] for row in rows)  # the forward stayed finite throughout
    assert result.steps == 6 and _finite(result.adapter_dir)
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 4 and "layers.0." in skipped[0] and "layers.1." not in skipped[0]
    assert any("training stops at step 6" in r.getMessage() for r in caplog.records)


def test_grpo_keeps_the_weights_and_moments_of_a_skipped_step_and_records_it(tmp_path, monkeypatch):
    from pdbgym.train.grpo.run import train_grpo

    monkeypatch.setenv("PDBGYM_HOME", str(fresh_home(tmp_path / "home")))
    model, tasks = make_toy_model(tmp_path / "toy-model"), make_toy_tasks(tmp_path / "toy-tasks")
    config = toy_config(tmp_path / "run", model, tasks, steps=3, save_steps=1, name="toy-guarded")
    with nan_backward(lambda n: n == 2):  # one forward with gradients a GRPO step: step 2's
        record = train_grpo(config, play=toy_play)
    rows = [json.loads(line) for line in (tmp_path / "run" / "steps.jsonl").read_text().splitlines()]
    assert [row[SKIPPED_KEY] for row in rows] == [0.0, 1.0, 0.0]
    assert record["nonfinite_skipped_steps"] == [2] and "1 step(s) were skipped" in record["warning"]
    assert record["nonfinite"]["stopped_at"] is None
    assert any("layers.0." in name for name in record["nonfinite"]["nonfinite_tensors"]["2"])
    checkpoints = tmp_path / "run" / "checkpoints"
    weights = [load_file(str(checkpoints / f"checkpoint-{s}" / "adapter_model.safetensors")) for s in (1, 2, 3)]
    moments = [torch.load(checkpoints / f"checkpoint-{s}" / "optimizer.pt", weights_only=False)["state"] for s in (1, 2)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])  # step 2 changed nothing
    assert all(torch.equal(moments[0][i]["exp_avg"], moments[1][i]["exp_avg"]) for i in moments[0])
    assert any(not torch.equal(weights[1][k], weights[2][k]) for k in weights[1])  # step 3 trained again
    assert all(bool(torch.isfinite(t).all()) for t in weights[2].values())
    from pdbgym.train.grpo.report import write_grpo_report

    report = write_grpo_report(tmp_path / "run").read_text()
    assert "steps skipped (non-finite gradients)" in report and "1 step(s) were skipped" in report

    # the skipped step's batches and weights were kept: a trainer built from the same config recomputes
    # the logged loss from them, and the same fault in its backward again
    from pdbgym.train.grpo.build import build
    from pdbgym.train.grpo.stepdump import replay_step

    dump = tmp_path / "run" / "nonfinite" / "step-2.pt"
    saved = torch.load(dump, weights_only=False)
    assert saved["step"] == 2 and len(saved["batches"]) == 1 and saved["batches"][0]["completion_ids"].shape[0] == 16
    def saved_as(name):  # a parameter's name in PEFT's adapter file
        return name.replace(".default", "").replace("lora_magnitude_vector.weight", "lora_magnitude_vector")

    assert {saved_as(k) for k in saved["trainable"]} == set(weights[0])
    assert all(torch.equal(value, weights[0][saved_as(k)]) for k, value in saved["trainable"].items())
    trainer, _, _ = build(toy_config(tmp_path / "replay", model, tasks, steps=3, name="toy-replay"), play=toy_play)
    clean = replay_step(trainer, dump)
    assert clean["finite"] and clean["loss"] == pytest.approx(rows[1]["loss"], rel=1e-4, abs=1e-6)
    with nan_backward(lambda n: True):
        faulty = replay_step(trainer, dump)
    assert not faulty["finite"] and faulty["loss"] == pytest.approx(clean["loss"])
    assert all(".layers.0." in name for name in faulty["nonfinite"])
    from pdbgym.train.grpo.stepdump import MAX_KEPT, dump_step

    kept = [dump_step(trainer, tmp_path / "kept", step) for step in range(1, MAX_KEPT + 2)]  # a run stops keeping
    assert all(path is not None for path in kept[:MAX_KEPT]) and kept[MAX_KEPT] is None
    assert len(list((tmp_path / "kept" / "nonfinite").glob("step-*.pt"))) == MAX_KEPT


def _two_processes(rank: int, init: str, results: str) -> None:
    import torch.distributed as dist

    from pdbgym.train.gradguard import GradientGuard

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        model = torch.nn.Linear(3, 2)
        guard = GradientGuard()
        guard.attach(model)
        outcomes = []
        for step, poisoned in enumerate((False, rank == 1, False), start=1):  # step 2: NaN on process 1 only
            out = model(torch.ones(1, 3)).sum()
            if poisoned:
                out = out * torch.tensor(float("nan"))
            out.backward()
            outcomes.append(guard.check(model, step))
            model.zero_grad()
        Path(results, f"rank{rank}.json").write_text(json.dumps({"taken": outcomes, "named": guard.offenders}))
        dist.barrier()  # leave together: an early teardown can abort in gloo ("terminate called ...")
    finally:
        dist.destroy_process_group()


def test_a_non_finite_gradient_on_one_process_makes_every_process_skip_that_step(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_two_processes, args=(f"file://{tmp_path / 'rendezvous'}", str(tmp_path)), nprocs=2)
    first, second = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert first["taken"] == second["taken"] == [True, False, True]
    assert first["named"] == {"2": []} and sorted(second["named"]["2"]) == ["bias", "weight"]
