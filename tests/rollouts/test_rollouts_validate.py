"""Every validation error and warning, triggered on purpose and checked to name record and field."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from pdbgym.rollouts.cache import MANIFEST_NAME, read_cache, read_manifest, write_cache
from pdbgym.rollouts.record import CacheFormatError, RolloutRecord
from pdbgym.rollouts.validate import (
    LOGPROB_POSITIVE_TOLERANCE,
    load_validated_cache,
    validate_cache,
    validate_cache_report,
    validate_record,
    validate_record_report,
)


def base_record(**changes: Any) -> RolloutRecord:
    """A valid 4-token prompt + 5-token response record (vocab 100), with ``changes`` applied."""
    data: dict[str, Any] = {
        "instance_id": "getmoto__moto-7168",
        "dataset": "swe_gym_train_eval_100",
        "tokens": [1, 2, 3, 4, 10, 11, 12, 13, 14],
        "prompt_len": 4,
        "response_length": 5,
        "loss_mask": [1, 1, 0, 0, 1],
        "rollout_log_probs": [-0.1, -2.5, 0.0, 0.0, -0.01],
        "reward_score": 1.0,
        "reward_extra": {"final_test_passed": True},
        "metadata": {
            "instance_id": "getmoto__moto-7168",
            "_termination_reason": "solved",
            "_sample_idx": 2,
            "tokenizer": {"name": "toy", "vocab_size": 100},
            "logprob_semantics": {"engine": "sglang", "temperature": 0.7, "top_p": 0.9,
                                  "top_p_renormalized": False},
        },
    }
    metadata_changes = changes.pop("metadata", {})
    data.update(changes)
    data["metadata"] = data["metadata"] | metadata_changes
    return RolloutRecord.from_dict(data)


LABEL = "swe_gym_train_eval_100/getmoto__moto-7168#2"


def test_the_base_record_is_valid() -> None:
    report = validate_record_report(base_record(), vocab_size=100)
    assert report.errors == [] and report.warnings == []


RECORD_ERRORS: list[tuple[str, dict[str, Any], int | None, str]] = [
    ("tokens longer than prompt+response", {"tokens": list(range(10))}, None, "tokens has 10 ids"),
    ("mask too short", {"loss_mask": [1, 1, 0, 0]}, None, "loss_mask has 4 entries"),
    ("log-probs too long", {"rollout_log_probs": [-0.1] * 6}, None, "rollout_log_probs has 6 entries"),
    ("negative prompt_len", {"prompt_len": -1, "tokens": [1, 2, 3, 10]}, None, "prompt_len (-1)"),
    ("mask value 2", {"loss_mask": [1, 2, 0, 0, 1]}, None, "loss_mask[1] is 2"),
    ("NaN log-prob", {"rollout_log_probs": [-0.1, math.nan, 0.0, 0.0, -0.1]}, None, "rollout_log_probs[1] is nan"),
    ("-inf log-prob", {"rollout_log_probs": [-math.inf, -1, 0.0, 0.0, -0.1]}, None, "rollout_log_probs[0] is -inf"),
    ("positive log-prob", {"rollout_log_probs": [-0.1, 0.3, 0.0, 0.0, -0.1]}, None, "rollout_log_probs[1] is 0.3"),
    ("id >= given vocab", {}, 12, "tokens[6] is 12, outside [0, 12) set by the given vocab size"),
    ("id >= recorded vocab", {"tokens": [1, 2, 3, 4, 10, 11, 100, 13, 14]}, None,
     "tokens[6] is 100, outside [0, 100) set by metadata['tokenizer']['vocab_size']"),
    ("bad recorded vocab", {"metadata": {"tokenizer": {"vocab_size": 0}}}, None,
     "metadata['tokenizer']['vocab_size'] is 0"),
    ("negative id", {"tokens": [-1, 2, 3, 4, 10, 11, 12, 13, 14], "metadata": {"tokenizer": {}}}, None,
     "tokens[0] is -1; token ids must be >= 0"),
    ("reward above 1", {"reward_score": 1.5}, None, "reward_score is 1.5"),
    ("reward NaN", {"reward_score": math.nan}, None, "reward_score is nan"),
    ("metadata names another instance", {"metadata": {"instance_id": "other"}}, None,
     "metadata['instance_id'] is 'other'"),
    ("negative sample index", {"metadata": {"_sample_idx": -1}}, None, "metadata['_sample_idx'] is -1"),
    ("semantics without engine", {"metadata": {"logprob_semantics": {"temperature": 0.7}}}, None,
     "['logprob_semantics']['engine']"),
    ("zero temperature", {"metadata": {"logprob_semantics": {"engine": "hf", "temperature": 0}}}, None,
     "['logprob_semantics']['temperature'] is 0"),
    ("top_p above 1", {"metadata": {"logprob_semantics": {"engine": "hf", "temperature": 1, "top_p": 1.5}}}, None,
     "['logprob_semantics']['top_p'] is 1.5"),
    ("renormalized not a bool", {"metadata": {"logprob_semantics": {"engine": "hf", "temperature": 1,
                                                                    "top_p_renormalized": "yes"}}}, None,
     "['logprob_semantics']['top_p_renormalized']"),
]


@pytest.mark.parametrize(("changes", "vocab_size", "expected"), [case[1:] for case in RECORD_ERRORS],
                         ids=[case[0] for case in RECORD_ERRORS])
def test_each_record_error_is_reported_with_record_and_field(changes: dict[str, Any], vocab_size: int | None,
                                                             expected: str) -> None:
    record = base_record(**changes)
    label = LABEL if record.metadata.get("_sample_idx") == 2 else LABEL[:-1] + str(record.metadata["_sample_idx"])
    errors = validate_record(record, vocab_size=vocab_size)
    assert any(error.startswith(f"{label}: ") and expected in error for error in errors), errors


def test_tiny_positive_log_prob_from_rounding_is_allowed() -> None:
    assert validate_record(base_record(rollout_log_probs=[-0.1, LOGPROB_POSITIVE_TOLERANCE / 10, 0, 0, 0])) == []
    assert validate_record(base_record(rollout_log_probs=[-0.1, LOGPROB_POSITIVE_TOLERANCE * 2, 0, 0, 0]))


WARNINGS = [
    ({"metadata": {"_termination_reason": "timeout"}}, "metadata['_termination_reason'] is 'timeout', not one of"),
    ({"reward_score": 0.0}, "reward_score 0.0 disagrees with _termination_reason 'solved'"),
    ({"metadata": {"_termination_reason": None}}, "metadata['_termination_reason'] is missing"),
]


@pytest.mark.parametrize(("changes", "expected"), WARNINGS)
def test_termination_problems_are_warnings_not_errors(changes: dict[str, Any], expected: str) -> None:
    report = validate_record_report(base_record(**changes))
    assert report.errors == []
    assert any(w.startswith(LABEL) and expected in w for w in report.warnings), report.warnings


def make_cache(tmp_path: Path, n_instances: int = 2) -> Path:
    records = [base_record(instance_id=f"inst-{i}", metadata={"instance_id": f"inst-{i}"}) for i in range(n_instances)]
    folder = write_cache(tmp_path / "cache", records)
    assert validate_cache(folder) == []
    return folder


def rewrite_manifest(folder: Path, edit: Callable[[list[dict[str, str]]], None]) -> None:
    entries = json.loads((folder / MANIFEST_NAME).read_text())
    edit(entries)
    (folder / MANIFEST_NAME).write_text(json.dumps(entries))


def test_manifest_entry_without_file(tmp_path: Path) -> None:
    folder = make_cache(tmp_path)
    (folder / read_manifest(folder)[1].path).unlink()
    (error,) = validate_cache(folder)
    assert "entry 1 (swe_gym_train_eval_100/inst-1): file swe_gym_train_eval_100/inst-1.pt is missing" in error


def test_file_missing_from_manifest(tmp_path: Path) -> None:
    folder = make_cache(tmp_path)
    rewrite_manifest(folder, lambda entries: entries.pop(0))
    (error,) = validate_cache(folder)
    assert error == f"swe_gym_train_eval_100/inst-0.pt: file is not listed in {MANIFEST_NAME}"


def test_file_holding_another_instance_than_listed(tmp_path: Path) -> None:
    folder = make_cache(tmp_path)

    def swap(entries: list[dict[str, str]]) -> None:
        entries[0]["instance_id"] = "inst-9"
        entries[1]["dataset"] = "other_set"

    rewrite_manifest(folder, swap)
    errors = validate_cache(folder)
    assert any("holds swe_gym_train_eval_100/inst-0#2 but the manifest lists swe_gym_train_eval_100/inst-9"
               in e for e in errors), errors
    assert any("manifest lists other_set/inst-1" in e for e in errors), errors


def test_duplicate_sample_across_files_and_within_a_file(tmp_path: Path) -> None:
    folder = make_cache(tmp_path)
    duplicate_path = folder / "swe_gym_train_eval_100" / "copy.pt"
    duplicate_path.write_bytes((folder / read_manifest(folder)[0].path).read_bytes())
    rewrite_manifest(folder, lambda e: e.append(e[0] | {"path": "swe_gym_train_eval_100/copy.pt"}))
    errors = validate_cache(folder)
    assert any(e.startswith("swe_gym_train_eval_100/inst-0#2: duplicate (instance_id, _sample_idx)") for e in errors)
    two = [base_record(instance_id="inst-0", metadata={"instance_id": "inst-0"}).to_dict()] * 2
    torch.save(two, folder / read_manifest(folder)[0].path)
    assert any("duplicate (instance_id, _sample_idx)" in e for e in validate_cache(folder))


def test_several_samples_in_a_file_need_sample_indices(tmp_path: Path) -> None:
    folder = make_cache(tmp_path, 1)
    sample = base_record(instance_id="inst-0", metadata={"instance_id": "inst-0"}).to_dict()
    del sample["metadata"]["_sample_idx"]
    torch.save([sample, sample], folder / read_manifest(folder)[0].path)
    assert any("holds 2 samples, so each needs metadata['_sample_idx']" in e for e in validate_cache(folder))


def test_same_file_listed_twice_and_type_errors_inside_files(tmp_path: Path) -> None:
    folder = make_cache(tmp_path)
    rewrite_manifest(folder, lambda e: e.append(dict(e[0])))
    assert any("entries 0 and 2 both list" in e for e in validate_cache(folder))
    bad = base_record(instance_id="inst-1", metadata={"instance_id": "inst-1"}).to_dict() | {"loss_mask": [1, 0.5]}
    torch.save(bad, folder / read_manifest(folder)[1].path)
    assert any("inst-1.pt sample 0: " in e and "'loss_mask'[1] is 0.5" in e for e in validate_cache(folder))


def test_corrupt_file_and_missing_manifest(tmp_path: Path) -> None:
    folder = make_cache(tmp_path)
    (folder / read_manifest(folder)[0].path).write_bytes(b"not a torch file")
    assert any("was refused by torch.load(weights_only=True): Unsupported operand" in e
               for e in validate_cache(folder))
    (folder / read_manifest(folder)[1].path).write_bytes(b"")
    assert any("inst-1.pt is not a readable torch file" in e for e in validate_cache(folder))
    (folder / MANIFEST_NAME).unlink()
    problems = validate_cache(folder)
    # the advice is a command a user can type, not a function inside the code
    assert any("manifest.json is missing" in e and f"pdbgym cache repair {folder}" in e for e in problems), problems


class Payload:
    """Unpickling this would create a file: proof that the loader ran attacker-chosen code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def test_pickled_code_is_refused_and_never_runs(tmp_path: Path) -> None:
    folder = make_cache(tmp_path)
    marker = tmp_path / "payload-ran"
    evil_path = folder / read_manifest(folder)[0].path
    torch.save(base_record().to_dict() | {"reward_extra": {"x": Payload(marker)}}, evil_path)
    with pytest.raises(CacheFormatError, match=r"refused by torch.load\(weights_only=True\): Unsupported global: GLOBAL io.open"):
        read_cache(folder)
    report = validate_cache_report(folder)
    assert any("refused" in e for e in report.errors)
    assert not marker.exists()
    torch.load(evil_path, weights_only=False)  # the payload is live: an unsafe load would have run it
    assert marker.exists()


def test_load_validated_cache_reads_each_file_once_and_returns_the_records(tmp_path: Path) -> None:
    folder = make_cache(tmp_path, 3)
    records, report = load_validated_cache(folder)
    assert report.ok and [r.instance_id for r in records] == ["inst-0", "inst-1", "inst-2"]
    assert [r.to_dict() for r in records] == [r.to_dict() for r in read_cache(folder)]
    torch.save(base_record(instance_id="inst-1", reward_score=3.0, metadata={"instance_id": "inst-1"}).to_dict(),
               folder / read_manifest(folder)[1].path)
    records, report = load_validated_cache(folder)
    assert not report.ok and any("inst-1#2: reward_score is 3.0" in e for e in report.errors)
