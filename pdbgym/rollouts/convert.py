"""Convert caches between ``.pt`` folders and Parquet, and prove the copy is exact by reading it back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pdbgym.rollouts.cache import CACHE_FORMATS, load_file_records, number_samples, read_cache, write_cache
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


def _by_instance(records: list[RolloutRecord]) -> dict[tuple[str, str], list[RolloutRecord]]:
    groups: dict[tuple[str, str], list[RolloutRecord]] = {}
    for record in records:
        groups.setdefault((record.dataset, record.instance_id), []).append(record)
    return groups


def _raise_unfaithful(where: Path, source_record: RolloutRecord, differing: list[str] | str) -> None:
    raise CacheFormatError(
        f"{where}: the copy of {source_record.label} differs from the source in {differing}; "
        "the destination is not a faithful copy (non-JSON metadata such as tuples or tensors cannot "
        "survive Parquet; convert those to lists first)"
    )


def verify_same_records(
    expected: list[RolloutRecord], written: list[RolloutRecord], where: Path, *, renumbered: bool = True
) -> None:
    """Raise ``CacheFormatError`` naming the first record and fields in which ``written`` differs.

    ``renumbered`` (a cache folder): the writer grouped samples by instance and gave each sample of a
    several-sample instance a ``_sample_idx`` (``number_samples``), so ``written`` is compared with
    exactly that numbering of ``expected``, instance by instance. Otherwise (one Parquet file, which
    keeps rows as given) records are compared in order.
    """
    if len(expected) != len(written):
        raise CacheFormatError(f"{where}: wrote {len(written)} records but the source has {len(expected)}")
    if not renumbered:
        pairs = list(zip(expected, written, strict=True))
    else:
        copies = _by_instance(written)
        pairs = []
        for key, samples in _by_instance(expected).items():
            wanted = number_samples(samples)
            got = sorted(copies.get(key, []), key=lambda record: record.sample_idx)
            if len(got) != len(wanted):
                _raise_unfaithful(where, samples[0], f"sample count ({len(got)} != {len(wanted)})")
            pairs.extend(zip(wanted, got, strict=True))
    for source_record, copy in pairs:
        differing = record_differences(source_record, copy)
        if differing or (copy.dataset, copy.instance_id) != (source_record.dataset, source_record.instance_id):
            _raise_unfaithful(where, source_record, differing or "identity")


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
    one_file = destination.suffix == ".parquet"
    if one_file:
        if destination.exists() and not overwrite:
            raise CacheFormatError(f"{destination} exists; pass --overwrite to replace it")
        write_parquet(destination, records)
    else:
        write_cache(destination, records, fmt=fmt, overwrite=overwrite)
    verify_same_records(records, load_any(destination), destination, renumbered=not one_file)
    return ConversionResult(source, destination, len(records), verified=True)
