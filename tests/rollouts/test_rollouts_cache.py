"""Cache writing, reading, appending and the $KL_EVAL_TEACHER_CACHE_DIR default, on real files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from pdbgym.rollouts.cache import (
    CACHE_DIR_ENV,
    MANIFEST_NAME,
    append_records,
    default_cache_dir,
    iter_cache,
    read_cache,
    read_manifest,
    write_cache,
)
from pdbgym.rollouts.compare import record_differences
from pdbgym.rollouts.record import CacheFormatError, RolloutRecord
from pdbgym.rollouts.synthetic import make_synthetic_records


def small_records(n_instances: int = 3, samples: int = 2, seed: int = 0) -> list[RolloutRecord]:
    return make_synthetic_records(n_instances, samples, vocab=1000, lengths=(20, 200), seed=seed)


def assert_same_records(got: list[RolloutRecord], want: list[RolloutRecord]) -> None:
    assert len(got) == len(want)
    for left, right in zip(got, want, strict=True):
        assert record_differences(left, right) == [], left.label


def test_pt_round_trip_keeps_every_sample_bit_exact(tmp_path: Path) -> None:
    records = small_records()
    folder = write_cache(tmp_path / "cache", records)
    assert folder == tmp_path / "cache"
    assert_same_records(read_cache(folder), records)
    entries = read_manifest(folder)
    assert [e.instance_id for e in entries] == [r.instance_id for r in records[::2]]  # 2 samples each
    stored = torch.load(folder / entries[0].path, map_location="cpu", weights_only=True)
    assert isinstance(stored, list) and [d["metadata"]["_sample_idx"] for d in stored] == [0, 1]
    assert entries[0].path == f"{records[0].dataset}/{records[0].instance_id}.pt"


def test_single_sample_is_stored_as_a_plain_dict_and_read_through_the_manifest_path(tmp_path: Path) -> None:
    records = small_records(samples=1)
    folder = write_cache(tmp_path / "c", records)
    stored = torch.load(folder / read_manifest(folder)[0].path, weights_only=True)
    assert isinstance(stored, dict) and "_sample_idx" not in stored["metadata"]
    assert_same_records(read_cache(folder / MANIFEST_NAME), records)


def test_parquet_file_cache_round_trip(tmp_path: Path) -> None:
    records = small_records()
    folder = write_cache(tmp_path / "c", records, fmt="parquet")
    assert all(e.path.endswith(".parquet") for e in read_manifest(folder))
    assert_same_records(read_cache(folder), records)


def test_tensor_values_from_other_tools_are_read(tmp_path: Path) -> None:
    record = small_records(1, 1)[0]
    as_tensors = record.to_dict() | {
        "tokens": torch.tensor(record.tokens, dtype=torch.int64),
        "loss_mask": torch.tensor(record.loss_mask, dtype=torch.float32),
        "rollout_log_probs": torch.tensor(record.rollout_log_probs, dtype=torch.float32),
        "prompt_len": torch.tensor(record.prompt_len),
    }
    folder = tmp_path / "c"
    (folder / record.dataset).mkdir(parents=True)
    torch.save(as_tensors, folder / record.dataset / "x.pt")
    (folder / MANIFEST_NAME).write_text(json.dumps(
        [{"dataset": record.dataset, "instance_id": record.instance_id, "path": f"{record.dataset}/x.pt"}]))
    (got,) = read_cache(folder)
    assert got.tokens == record.tokens and got.loss_mask == record.loss_mask
    assert got.prompt_len == record.prompt_len
    want32 = np.asarray(record.rollout_log_probs, dtype=np.float32).astype(np.float64).tolist()
    assert got.rollout_log_probs == want32


def test_fractional_mask_in_a_tensor_is_refused_not_truncated() -> None:
    record = small_records(1, 1)[0].to_dict()
    record["loss_mask"] = torch.full((record["response_length"],), 0.5)
    with pytest.raises(CacheFormatError, match=r"loss_mask.*0\.5"):
        RolloutRecord.from_dict(record)


def test_existing_cache_is_not_overwritten_by_accident(tmp_path: Path) -> None:
    records = small_records()
    write_cache(tmp_path / "c", records)
    with pytest.raises(CacheFormatError, match="overwrite=True"):
        write_cache(tmp_path / "c", records[:2])
    write_cache(tmp_path / "c", records[:2], overwrite=True)
    assert_same_records(read_cache(tmp_path / "c"), records[:2])
    assert len(list((tmp_path / "c").rglob("*.pt"))) == 1


def test_append_adds_samples_and_is_idempotent(tmp_path: Path) -> None:
    first, second = small_records(2, 1, seed=1), small_records(2, 1, seed=2)
    second = [RolloutRecord.from_dict(r.to_dict() | {"instance_id": f.instance_id, "metadata": r.metadata
                                                    | {"instance_id": f.instance_id}})
              for r, f in zip(second, first, strict=True)]
    folder = tmp_path / "c"
    append_records(folder, first)
    append_records(folder, second)
    append_records(folder, second)  # a resumed job re-sends what it already wrote
    got = read_cache(folder)
    assert len(got) == 4 and len(read_manifest(folder)) == 2
    assert [r.sample_idx for r in got] == [0, 1, 0, 1]
    assert record_differences(got[1], second[0], ignore_sample_idx=True) == []


def test_append_resumes_after_a_crash_between_file_and_manifest(tmp_path: Path) -> None:
    records = small_records(3, 2)
    folder = tmp_path / "c"
    append_records(folder, records[:2])
    manifest_before = (folder / MANIFEST_NAME).read_text()
    append_records(folder, records[2:4])
    (folder / MANIFEST_NAME).write_text(manifest_before)  # the crash lost the manifest update
    append_records(folder, records)
    assert_same_records(read_cache(folder), records)


def test_append_refuses_a_different_sample_under_a_taken_index(tmp_path: Path) -> None:
    records = small_records(1, 2)
    append_records(tmp_path, records)
    clash = RolloutRecord.from_dict(records[1].to_dict() | {"reward_score": 0.5})
    with pytest.raises(CacheFormatError, match="_sample_idx 1"):
        append_records(tmp_path, [clash])


def test_file_naming_another_instance_than_its_manifest_entry_is_an_error(tmp_path: Path) -> None:
    folder = write_cache(tmp_path / "c", small_records(2, 1))
    entries = json.loads((folder / MANIFEST_NAME).read_text())
    entries[0]["path"], entries[1]["path"] = entries[1]["path"], entries[0]["path"]
    (folder / MANIFEST_NAME).write_text(json.dumps(entries))
    with pytest.raises(CacheFormatError, match="manifest lists it as"):
        list(iter_cache(folder))


def test_default_cache_dir_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    with pytest.raises(CacheFormatError, match=CACHE_DIR_ENV):
        default_cache_dir()
    with pytest.raises(CacheFormatError, match=CACHE_DIR_ENV):
        read_cache()
    records = small_records(2, 1)
    write_cache(tmp_path / "c", records)
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    assert_same_records(read_cache(), records)


def test_missing_manifest_and_odd_instance_ids(tmp_path: Path) -> None:
    with pytest.raises(CacheFormatError, match="manifest.json is missing"):
        read_cache(tmp_path)
    record = small_records(1, 1)[0]
    odd = RolloutRecord.from_dict(record.to_dict() | {"instance_id": "django/django#1 a"})
    folder = write_cache(tmp_path / "c", [odd])
    assert read_manifest(folder)[0].path.count("/") == 1
    assert read_cache(folder)[0].instance_id == "django/django#1 a"
    with pytest.raises(CacheFormatError, match="instance_id '..'"):
        write_cache(tmp_path / "d", [RolloutRecord.from_dict(record.to_dict() | {"instance_id": ".."})])


def test_append_to_a_parquet_cache_keeps_its_format_and_reports_progress(tmp_path: Path) -> None:
    records = small_records(2, 2)
    folder = write_cache(tmp_path / "c", records[:2], fmt="parquet")
    append_records(folder, records[2:])
    assert [Path(e.path).suffix for e in read_manifest(folder)] == [".parquet", ".parquet"]
    calls: list[tuple[int, int]] = []
    assert_same_records(list(iter_cache(folder, on_file=lambda done, total: calls.append((done, total)))), records)
    assert calls == [(0, 2), (1, 2)]
