"""Reproduction acceptance against recorded targets, from trainer_state.json or a JSONL metrics file."""

from __future__ import annotations

import json
import shutil

import pytest
from adapters_testkit import shared_world

from pdbgym.adapters.accept import evaluate, load_targets, relate_to_lineage
from pdbgym.adapters.errors import AdapterError
from pdbgym.adapters.operations import register_path
from pdbgym.adapters.peft_format import adapter_content_hash, load_adapter
from pdbgym.adapters.store import Store


@pytest.fixture
def world(tmp_path_factory):
    return shared_world(tmp_path_factory)


def _candidate(world, tmp_path, losses):
    candidate = tmp_path / "candidate"
    shutil.copytree(world.sft, candidate)
    history = [{"step": step, "loss": loss + 0.05} for step, loss in losses]
    history += [{"step": step, "eval_loss": loss} for step, loss in losses]
    (candidate / "trainer_state.json").write_text(json.dumps({"global_step": losses[-1][0], "log_history": history}))
    return candidate


def _targets(tmp_path, **overrides):
    # world.sft is DoRA on 8 modules: 8 x (lora_A, lora_B, magnitude) = 24 tensors.
    targets = {"lora_tensor_count": 24, "best_val_loss": 0.11644, "best_step": 156, "val_loss_tolerance": 0.002,
               "rank": 4, "use_dora": True, **overrides}
    path = tmp_path / "targets.json"
    path.write_text(json.dumps(targets))
    return load_targets(path)


def test_reproduction_within_tolerance_is_accepted(world, tmp_path):
    candidate = _candidate(world, tmp_path, [(52, 0.31), (104, 0.14), (156, 0.1175), (208, 0.125)])
    report = evaluate(candidate, _targets(tmp_path))
    assert report.accepted, report.as_dict()
    assert "restores the lineage's init" in report.statement
    assert "does not restore any delta" in report.statement


def test_reproduction_outside_tolerance_or_wrong_step_is_rejected(world, tmp_path):
    candidate = _candidate(world, tmp_path, [(52, 0.31), (104, 0.13), (156, 0.14)])
    report = evaluate(candidate, _targets(tmp_path))
    failed = {check.name for check in report.checks if not check.passed}
    assert failed == {"best_val_loss", "best_step"} and not report.accepted
    assert report.statement.startswith("REJECTED")


def test_tensor_count_rank_and_total_steps_must_match(world, tmp_path):
    candidate = _candidate(world, tmp_path, [(156, 0.11644), (208, 0.12)])
    report = evaluate(candidate, _targets(tmp_path, lora_tensor_count=432, rank=24, total_steps=312))
    assert {c.name for c in report.checks if not c.passed} == {"lora_tensor_count", "rank", "total_steps"}
    assert evaluate(candidate, _targets(tmp_path, total_steps=208)).accepted


def test_jsonl_metrics_file(world, tmp_path):
    candidate = tmp_path / "candidate"
    shutil.copytree(world.sft, candidate)
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(json.dumps({"step": s, "val_loss": v}) for s, v in [(100, 0.2), (156, 0.1166)]))
    assert evaluate(candidate, _targets(tmp_path, total_steps=156), metrics).accepted


def test_bad_targets_and_missing_training_state(world, tmp_path):
    path = tmp_path / "targets.json"
    path.write_text(json.dumps({"lora_tensor_count": 24, "best_step": 156}))
    with pytest.raises(AdapterError, match="'best_val_loss' is missing"):
        load_targets(path)
    candidate = tmp_path / "bare"
    shutil.copytree(world.sft, candidate)
    with pytest.raises(AdapterError, match="no trainer_state.json"):
        evaluate(candidate, _targets(tmp_path))


def test_candidate_never_restores_the_lost_delta(world, tmp_path):
    store = Store(tmp_path / "store")
    register_path(store, world.base, None, ["base"], None)
    sft_hash = adapter_content_hash(load_adapter(world.sft))
    register_path(store, world.rl, sft_hash, ["rl"], None)
    retrained = _candidate(world, tmp_path, [(156, 0.11644)])
    (retrained / "adapter_config.json").write_text(
        json.dumps({**json.loads((world.sft / "adapter_config.json").read_text()), "lora_alpha": 9}))
    note = relate_to_lineage(store, "rl", retrained)
    assert "stays unservable" in note and sft_hash[:12] in note
    assert "bit-identical" in relate_to_lineage(store, "rl", world.sft)


def test_nan_validation_loss_never_decides_the_best_and_bad_entries_are_named(world, tmp_path):
    # A NaN first in the curve made min() return it (NaN compares false), rejecting a good candidate.
    candidate = _candidate(world, tmp_path, [(100, float("nan")), (156, 0.1166), (200, 0.2)])
    report = evaluate(candidate, _targets(tmp_path))
    assert report.accepted, report.as_dict()
    assert any("non-finite" in note and "100" in note for note in report.notes)
    (candidate / "trainer_state.json").write_text(json.dumps({"log_history": [{"eval_loss": 0.2}]}))
    with pytest.raises(AdapterError, match=r"log_history\[0\].*integer 'step'"):
        evaluate(candidate, _targets(tmp_path))
    (candidate / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": 1, "eval_loss": "nan"}]}))
    with pytest.raises(AdapterError, match="NaN or infinite"):
        evaluate(candidate, _targets(tmp_path))


def test_jsonl_metrics_line_that_is_not_an_object_is_a_named_error(world, tmp_path):
    candidate = _candidate(world, tmp_path, [(156, 0.1166)])
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1, "val_loss": 0.2}\n[2, 0.1]\n')
    with pytest.raises(AdapterError, match=r"metrics.jsonl:2: expected"):
        evaluate(candidate, _targets(tmp_path), metrics)
