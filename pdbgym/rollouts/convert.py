"""Convert caches between ``.pt`` folders and Parquet, and prove the copy is exact by reading it back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdbgym.rollouts.cache import CACHE_FORMATS, load_file_records, read_cache, write_cache
from pdbgym.rollouts.compare import record_differences
from pdbgym.rollouts.parquet import read_parquet, write_parquet
from pdbgym.rollouts.record import CacheFormatError, RolloutRecord


@dataclass(frozen=True)
class ConversionResult:
    """What ``convert_cache`` wrote and checked."""

    source: Path
    destination: Path
    records: int
    verified: bool


def load_any(source: Path | str) -> list[RolloutRecord]:
    """Records from a cache folder (or its manifest), a ``.parquet`` file, or a single ``.pt`` file."""
    source = Path(source)
    if source.is_file() and source.suffix == ".parquet":
        return read_parquet(source)
    if source.is_file() and source.suffix == ".pt":
        return load_file_records(source)
    return read_cache(source)


def _sort_key(record: RolloutRecord) -> tuple[str, str, int]:
    return (record.dataset, record.instance_id, record.sample_idx)


def verify_same_records(expected: list[RolloutRecord], written: list[RolloutRecord], where: Path) -> None:
    """Raise ``CacheFormatError`` naming the first record and fields in which ``written`` differs.

    Records are matched by (dataset, instance_id, _sample_idx), since a folder groups samples by
    instance while a Parquet file keeps row order. A ``_sample_idx`` the writer had to add (several
    samples of one instance without one) is not counted as a difference.
    """
    if len(expected) != len(written):
        raise CacheFormatError(f"{where}: wrote {len(written)} records but the source has {len(expected)}")
    positions: dict[tuple[str, str], int] = {}
    keyed = []
    for record in expected:
        key = (record.dataset, record.instance_id)
        index = record.metadata.get("_sample_idx", positions.get(key, 0))
        positions[key] = positions.get(key, 0) + 1
        keyed.append(((record.dataset, record.instance_id, index), record))
    keyed.sort(key=lambda pair: pair[0])
    for (key, source_record), copy in zip(keyed, sorted(written, key=_sort_key), strict=True):
        had_index = "_sample_idx" in source_record.metadata
        differing = record_differences(source_record, copy, ignore_sample_idx=not had_index)
        if differing or _sort_key(copy)[:2] != key[:2]:
            raise CacheFormatError(
                f"{where}: the copy of {source_record.label} differs from the source in {differing or 'identity'}; "
                "the destination is not a faithful copy (non-JSON metadata such as tuples or tensors cannot "
                "survive Parquet; convert those to lists first)"
            )


def convert_cache(
    source: Path | str, destination: Path | str, *, fmt: str = "pt", overwrite: bool = False
) -> ConversionResult:
    """Copy a cache to ``destination`` and verify it record by record, bit for bit.

    ``destination`` ending in ``.parquet`` is written as one Parquet file; anything else as a cache
    folder whose instance files are ``fmt`` (``pt`` or ``parquet``).
    """
    source, destination = Path(source), Path(destination)
    if fmt not in CACHE_FORMATS:
        raise CacheFormatError(f"unknown cache file format {fmt!r}; use one of {CACHE_FORMATS}")
    if destination.resolve() == source.resolve():
        raise CacheFormatError(f"source and destination are both {source}; pick another destination")
    records = load_any(source)
    if destination.suffix == ".parquet":
        if destination.exists() and not overwrite:
            raise CacheFormatError(f"{destination} exists; pass --overwrite to replace it")
        write_parquet(destination, records)
    else:
        write_cache(destination, records, fmt=fmt, overwrite=overwrite)
    verify_same_records(records, load_any(destination), destination)
    return ConversionResult(source, destination, len(records), verified=True)
