"""Parquet files and `convert`: columnar schema, lossless round trips, refusal of lossy copies."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pdbgym.rollouts.cache import read_cache, write_cache
from pdbgym.rollouts.compare import record_differences
from pdbgym.rollouts.convert import convert_cache, verify_same_records
from pdbgym.rollouts.parquet import read_parquet, write_parquet
from pdbgym.rollouts.record import CacheFormatError, RolloutRecord
from pdbgym.rollouts.synthetic import make_synthetic_records

AWKWARD_FLOATS = [-0.1, -1e-300, -5e-324, -0.0, 0.0, -(2.0**-149), -1 / 3, -123456.789012345678, -math.pi]


def awkward_record() -> RolloutRecord:
    """Log-probs whose float64 bits a float32 column would change (subnormals, -0.0, 1/3)."""
    n = len(AWKWARD_FLOATS)
    return RolloutRecord(
        instance_id="a/b", dataset="d", tokens=list(range(3 + n)), prompt_len=3, response_length=n,
        loss_mask=[1, 0] * (n // 2) + [1] * (n % 2), rollout_log_probs=list(AWKWARD_FLOATS),
        reward_score=0.25, reward_extra={"nested": {"list": [1, 2.5, None, "x"]}},
        metadata={"_termination_reason": "other", "unicode": "résumé ✓", "_sample_idx": 0},
    )


def bits(values: list[float]) -> list[bytes]:
    return [struct.pack("<d", v) for v in values]


def test_float64_log_probs_survive_bit_for_bit(tmp_path: Path) -> None:
    records = [awkward_record()]
    path = write_parquet(tmp_path / "a.parquet", records)
    schema = pq.read_schema(path)
    assert schema.field("rollout_log_probs").type == pa.list_(pa.float64())
    (got,) = read_parquet(path)
    assert bits(got.rollout_log_probs) == bits(AWKWARD_FLOATS)
    assert record_differences(got, records[0]) == []


def test_schema_is_columnar_and_float32_exact_values_use_float32(tmp_path: Path) -> None:
    records = make_synthetic_records(3, 2, vocab=500, lengths=(30, 90), seed=3)
    for record in records:
        record.rollout_log_probs = np.asarray(record.rollout_log_probs, np.float32).astype(float).tolist()
    path = write_parquet(tmp_path / "s.parquet", records)
    schema = pq.read_schema(path)
    assert schema.field("tokens").type == pa.list_(pa.int32())
    assert schema.field("loss_mask").type == pa.list_(pa.int8())
    assert schema.field("rollout_log_probs").type == pa.list_(pa.float32())
    assert schema.field("metadata").type == pa.string()
    table = pq.read_table(path)  # plain pyarrow, no pdbgym and no pickle, sees the data
    assert table.column("tokens").to_pylist()[4] == records[4].tokens
    assert [r.to_dict() for r in read_parquet(path)] == [r.to_dict() for r in records]
    with pytest.raises(CacheFormatError, match="not all exactly representable in float32"):
        write_parquet(tmp_path / "x.parquet", [awkward_record()], logprob_dtype="float32")


def test_non_json_metadata_is_refused_with_record_and_field(tmp_path: Path) -> None:
    record = awkward_record()
    record.metadata["when"] = object()
    with pytest.raises(CacheFormatError, match=r"d/a/b#0: field 'metadata' cannot be stored as JSON"):
        write_parquet(tmp_path / "x.parquet", [record])
    assert not (tmp_path / "x.parquet").exists()


def test_convert_pt_folder_to_parquet_and_back(tmp_path: Path) -> None:
    records = make_synthetic_records(3, 2, vocab=500, lengths=(30, 90), seed=4) + [awkward_record()]
    source = write_cache(tmp_path / "pt", records)
    result = convert_cache(source, tmp_path / "all.parquet")
    assert result.records == 7 and result.verified
    back = convert_cache(tmp_path / "all.parquet", tmp_path / "pt2")
    assert back.records == 7
    for got, want in zip(read_cache(tmp_path / "pt2"), read_cache(source), strict=True):
        assert record_differences(got, want) == []
        assert bits(got.rollout_log_probs) == bits(want.rollout_log_probs)
    assert sorted(p.name for p in (tmp_path / "pt2").rglob("*.pt")) == sorted(
        p.name for p in source.rglob("*.pt"))
    with pytest.raises(CacheFormatError, match="exists; pass --overwrite"):
        convert_cache(source, tmp_path / "all.parquet")


def test_conversion_that_changes_a_value_is_caught(tmp_path: Path) -> None:
    record = awkward_record()
    record.metadata["pair"] = (1, 2)  # JSON turns the tuple into a list: not a faithful copy
    folder = write_cache(tmp_path / "pt", [record])
    with pytest.raises(CacheFormatError, match=r"d/a/b#0 differs from the source in \['metadata'\]"):
        convert_cache(folder, tmp_path / "out.parquet")
    changed = RolloutRecord.from_dict(record.to_dict() | {"rollout_log_probs": [-0.0] + AWKWARD_FLOATS[1:]})
    record.rollout_log_probs[0] = -0.1
    with pytest.raises(CacheFormatError, match="rollout_log_probs"):
        verify_same_records([record], [changed], tmp_path)


def test_unreadable_parquet_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 nonsense")
    with pytest.raises(CacheFormatError, match="not a readable Parquet file"):
        read_parquet(tmp_path / "bad.parquet")
    pq.write_table(pa.table({"instance_id": ["x"]}), tmp_path / "other.parquet")
    with pytest.raises(CacheFormatError, match=r"lacks column\(s\) \['dataset'"):
        read_parquet(tmp_path / "other.parquet")


def test_tensor_cache_from_another_tool_round_trips_through_parquet(tmp_path: Path) -> None:
    import json

    import torch

    records = make_synthetic_records(2, 2, vocab=500, lengths=(30, 90), seed=8)
    folder = tmp_path / "tensors"
    entries = []
    for instance_id in dict.fromkeys(r.instance_id for r in records):
        samples = [r.to_dict() | {"tokens": torch.tensor(r.tokens, dtype=torch.int32),
                                  "loss_mask": torch.tensor(r.loss_mask, dtype=torch.uint8),
                                  "rollout_log_probs": torch.tensor(r.rollout_log_probs, dtype=torch.float32)}
                   for r in records if r.instance_id == instance_id]
        (folder / "ds").mkdir(parents=True, exist_ok=True)
        torch.save(samples, folder / "ds" / f"{instance_id}.pt")
        entries.append({"dataset": records[0].dataset, "instance_id": instance_id, "path": f"ds/{instance_id}.pt"})
    (folder / "manifest.json").write_text(json.dumps(entries))
    convert_cache(folder, tmp_path / "t.parquet")
    assert pq.read_schema(tmp_path / "t.parquet").field("rollout_log_probs").type == pa.list_(pa.float32())
    for got, want in zip(read_parquet(tmp_path / "t.parquet"), records, strict=True):
        assert got.tokens == want.tokens and got.loss_mask == want.loss_mask
        assert got.rollout_log_probs == np.float32(want.rollout_log_probs).astype(np.float64).tolist()


def test_convert_numbers_unindexed_samples_like_the_writer(tmp_path: Path) -> None:
    # An unindexed sample listed before an explicit _sample_idx 0 is stored as sample 1; the check after
    # converting must compare it with sample 1, not report a faithful copy as different.
    base = awkward_record()
    unindexed = RolloutRecord.from_dict(base.to_dict() | {"metadata": {"_termination_reason": "other"}})
    indexed = RolloutRecord.from_dict(base.to_dict() | {"rollout_log_probs": [-2.0] * base.response_length})
    mixed = write_parquet(tmp_path / "mixed.parquet", [unindexed, indexed])
    result = convert_cache(mixed, tmp_path / "folder")
    assert result.records == 2
    stored = {record.sample_idx: record for record in read_cache(tmp_path / "folder")}
    assert stored[1].rollout_log_probs == unindexed.rollout_log_probs
    assert stored[0].rollout_log_probs == [-2.0] * base.response_length
    convert_cache(tmp_path / "folder", tmp_path / "back.parquet")
