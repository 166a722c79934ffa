"""Records as a columnar Parquet file: one row per sample, no pickle anywhere.

Schema (``PARQUET_SCHEMA_DOC`` spells it out for the docs):

    instance_id string, dataset string, tokens list<int32>, prompt_len int64, response_length int64,
    loss_mask list<int8>, rollout_log_probs list<float64 | float32>, reward_score float64,
    reward_extra string (JSON), metadata string (JSON)

Log-probs are written as float64 unless every value is exactly a float32 (then float32, half the size);
either way ``.pt -> parquet -> .pt`` gives back the same bits. ``logprob_dtype`` forces a choice, and
forcing float32 on values that are not float32-exact is refused rather than rounded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal

import numpy as np

from pdbgym.fileio import JSONValue, atomic_target
from pdbgym.rollouts.optional import import_optional
from pdbgym.rollouts.record import CacheFormatError, RolloutRecord

if TYPE_CHECKING:  # annotations only: pyarrow is optional (pdbgym[parquet])
    import pyarrow as pa

LogprobDtype = Literal["auto", "float32", "float64"]
FORMAT_TAG = b"pdbgym-teacher-cache"
FORMAT_VERSION = b"1"
INT32_MAX = 2**31 - 1
RECORDS_PER_BATCH = 256  # 256 x 128k tokens stays far below the 2^31 values a list<> batch can hold


def _json_text(value: Mapping[str, object], record: RolloutRecord, field_name: str) -> str:
    try:
        return json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise CacheFormatError(
            f"{record.label}: field {field_name!r} cannot be stored as JSON ({exc}); keep only "
            "str/int/float/bool/None/list/dict values there"
        ) from exc


def _float32_exact(values: np.ndarray) -> bool:
    as32 = values.astype(np.float32)
    return bool(np.array_equal(as32.astype(np.float64), values, equal_nan=True))


def _list_column(pa: ModuleType, flat: np.ndarray, lengths: list[int], value_type: pa.DataType) -> pa.ListArray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # list<...> has int32 offsets; write_parquet keeps each batch's total well under 2^31 values
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(flat, type=value_type))


def choose_logprob_dtype(records: list[RolloutRecord], logprob_dtype: LogprobDtype
                         ) -> Literal["float32", "float64"]:
    """``float32`` or ``float64`` for the log-prob column; refuses a lossy float32."""
    exact32 = all(
        _float32_exact(np.asarray(r.rollout_log_probs, dtype=np.float64)) for r in records
    )
    if logprob_dtype == "auto":
        return "float32" if exact32 else "float64"
    if logprob_dtype == "float32" and not exact32:
        raise CacheFormatError(
            "log-probs are not all exactly representable in float32; write them as float64 "
            "(logprob_dtype='float64' or 'auto') to keep them lossless"
        )
    return logprob_dtype


def records_to_table(records: list[RolloutRecord], *, logprob_dtype: LogprobDtype = "auto") -> pa.Table:
    """A ``pyarrow.Table`` with one row per record (see the module docstring for the schema)."""
    pa = import_optional("pyarrow", "parquet", "Parquet caches")

    tokens = np.fromiter((t for r in records for t in r.tokens), dtype=np.int64)
    if tokens.size and (tokens.min() < 0 or tokens.max() > INT32_MAX):
        bad = next(r for r in records if r.tokens and (min(r.tokens) < 0 or max(r.tokens) > INT32_MAX))
        raise CacheFormatError(f"{bad.label}: field 'tokens' has ids outside [0, 2^31) that int32 cannot hold")
    masks = np.fromiter((m for r in records for m in r.loss_mask), dtype=np.int64)
    if masks.size and (masks.min() < -128 or masks.max() > 127):
        raise CacheFormatError("field 'loss_mask' has values outside int8; masks must be 0 or 1")
    log_probs = np.fromiter((x for r in records for x in r.rollout_log_probs), dtype=np.float64)
    chosen = choose_logprob_dtype(records, logprob_dtype)
    float_type = pa.float32() if chosen == "float32" else pa.float64()
    columns = {
        "instance_id": pa.array([r.instance_id for r in records], type=pa.string()),
        "dataset": pa.array([r.dataset for r in records], type=pa.string()),
        "tokens": _list_column(pa, tokens.astype(np.int32), [len(r.tokens) for r in records], pa.int32()),
        "prompt_len": pa.array([r.prompt_len for r in records], type=pa.int64()),
        "response_length": pa.array([r.response_length for r in records], type=pa.int64()),
        "loss_mask": _list_column(pa, masks.astype(np.int8), [len(r.loss_mask) for r in records], pa.int8()),
        "rollout_log_probs": _list_column(
            pa, log_probs.astype(chosen), [len(r.rollout_log_probs) for r in records], float_type
        ),
        "reward_score": pa.array([r.reward_score for r in records], type=pa.float64()),
        "reward_extra": pa.array([_json_text(r.reward_extra, r, "reward_extra") for r in records]),
        "metadata": pa.array([_json_text(r.metadata, r, "metadata") for r in records]),
    }
    table = pa.table(columns)
    return table.replace_schema_metadata({b"pdbgym.format": FORMAT_TAG, b"pdbgym.version": FORMAT_VERSION})


def write_parquet(
    path: Path | str, records: Iterable[RolloutRecord], *, logprob_dtype: LogprobDtype = "auto"
) -> Path:
    """Write records to one Parquet file atomically (zstd-compressed); returns the path."""
    pq = import_optional("pyarrow.parquet", "parquet", "Parquet caches")

    records = list(records)
    dtype = choose_logprob_dtype(records, logprob_dtype)
    batches = [records[start : start + RECORDS_PER_BATCH] for start in range(0, len(records), RECORDS_PER_BATCH)]
    path = Path(path)
    with atomic_target(path) as tmp:
        first = records_to_table(batches[0] if batches else [], logprob_dtype=dtype)
        with pq.ParquetWriter(tmp, first.schema, compression="zstd") as writer:
            writer.write_table(first)
            for batch in batches[1:]:
                writer.write_table(records_to_table(batch, logprob_dtype=dtype))
    return path


def _split_list_column(column: pa.ListArray | pa.ChunkedArray) -> list[list[float]]:
    """Rows of a list column as Python lists, sliced from one numpy buffer (fast for long rows)."""
    import pyarrow as pa  # optional: pyarrow (pdbgym[parquet])

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    rows: list[list[float]] = []  # ids and mask values are ints
    for chunk in chunks:
        if chunk.null_count:
            raise CacheFormatError("a list column holds nulls; every row needs tokens, mask and log-probs")
        offsets = chunk.offsets.to_numpy()
        flat = chunk.values.to_numpy(zero_copy_only=False)
        rows.extend(flat[offsets[i] : offsets[i + 1]].tolist() for i in range(len(chunk)))
    return rows


def _load_json(text: str | None, row: int, field_name: str, path: Path) -> dict[str, JSONValue]:
    try:
        value = json.loads(text) if text else {}
    except json.JSONDecodeError as exc:
        raise CacheFormatError(f"{path} row {row}: field {field_name!r} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise CacheFormatError(f"{path} row {row}: field {field_name!r} must hold a JSON object")
    return value


def read_parquet(path: Path | str) -> list[RolloutRecord]:
    """Records from a Parquet file written by ``write_parquet`` (or any file with that schema)."""
    pa = import_optional("pyarrow", "parquet", "Parquet caches")
    pq = import_optional("pyarrow.parquet", "parquet", "Parquet caches")

    path = Path(path)
    if not path.is_file():
        raise CacheFormatError(f"parquet file {path} does not exist")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise CacheFormatError(f"{path} is not a readable Parquet file: {exc}") from exc
    required = ("instance_id", "dataset", "tokens", "prompt_len", "response_length", "loss_mask",
                "rollout_log_probs")
    missing = [name for name in required if name not in table.column_names]
    if missing:
        raise CacheFormatError(f"{path} lacks column(s) {missing}; it was not written as a teacher cache")
    lists = {name: _split_list_column(table.column(name)) for name in ("tokens", "loss_mask", "rollout_log_probs")}
    plain = {name: table.column(name).to_pylist() for name in table.column_names if name not in lists}
    records = []
    for row in range(table.num_rows):
        reward = plain.get("reward_score", [0.0] * table.num_rows)[row]
        data = {
            "instance_id": plain["instance_id"][row],
            "dataset": plain["dataset"][row],
            "tokens": lists["tokens"][row],
            "prompt_len": plain["prompt_len"][row],
            "response_length": plain["response_length"][row],
            "loss_mask": lists["loss_mask"][row],
            "rollout_log_probs": lists["rollout_log_probs"][row],
            "reward_score": math.nan if reward is None else reward,
            "reward_extra": _load_json(plain.get("reward_extra", [None] * table.num_rows)[row], row,
                                       "reward_extra", path),
            "metadata": _load_json(plain.get("metadata", [None] * table.num_rows)[row], row, "metadata", path),
        }
        try:
            records.append(RolloutRecord.from_dict(data))
        except CacheFormatError as exc:
            raise CacheFormatError(f"{path} row {row}: {exc}") from exc
    return records
