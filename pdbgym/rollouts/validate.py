"""Checks for records and caches. Every problem names the record (``dataset/instance_id#sample``) or
the file, and the field that is wrong.

Errors make a cache unusable for scoring; warnings (an unknown termination reason, a reward that
disagrees with the termination reason) are reported but do not fail validation.

Log-probs must be finite and <= ``LOGPROB_POSITIVE_TOLERANCE`` (1e-4 nats). A log-probability is
<= 0 in exact arithmetic, but an engine computing log_softmax in fp32 can return a tiny positive value
for a token of probability ~1 (rounding in logsumexp is about 1e-6 relative to logits of tens); 1e-4
leaves room for that and still catches sign errors and probabilities stored instead of log-probs.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pdbgym.rollouts.cache import (
    MANIFEST_NAME,
    FileProgress,
    entry_file,
    load_file_dicts,
    read_manifest,
    resolve_cache_source,
)
from pdbgym.rollouts.record import (
    CacheFormatError,
    RolloutRecord,
    declared_fingerprints,
)
from pdbgym.termination import TERMINATION_REASONS

__all__ = ["CacheFormatError", "ValidationReport", "iter_validated_cache", "load_validated_cache", "validate_cache",
           "validate_cache_report", "validate_record", "validate_record_report", "LOGPROB_POSITIVE_TOLERANCE"]

LOGPROB_POSITIVE_TOLERANCE = 1e-4


@dataclass
class ValidationReport:
    """Problems found: ``errors`` fail validation, ``warnings`` do not."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def extend(self, other: ValidationReport) -> None:
        self.errors.extend(other.errors)
        self.warnings.extend(other.warnings)


def _first_bad(values: Sequence[float], bad: np.ndarray) -> tuple[int, float, int] | None:
    """(first bad position, its value, how many are bad) for a boolean ``bad`` over ``values``."""
    positions = np.flatnonzero(bad)
    return None if positions.size == 0 else (int(positions[0]), values[positions[0]], int(positions.size))


def _check_lengths(rec: RolloutRecord, errors: list[str]) -> None:
    label = rec.label
    if rec.prompt_len < 0 or rec.response_length < 0:
        errors.append(f"{label}: prompt_len ({rec.prompt_len}) and response_length ({rec.response_length}) "
                      "must be >= 0")
    if len(rec.tokens) != rec.prompt_len + rec.response_length:
        errors.append(f"{label}: tokens has {len(rec.tokens)} ids but prompt_len + response_length = "
                      f"{rec.prompt_len} + {rec.response_length} = {rec.prompt_len + rec.response_length}")
    for name in ("loss_mask", "rollout_log_probs"):
        length = len(getattr(rec, name))
        if length != rec.response_length:
            errors.append(f"{label}: {name} has {length} entries but response_length is {rec.response_length}")


def _check_values(rec: RolloutRecord, vocab_size: int | None, errors: list[str]) -> None:
    label = rec.label
    mask = np.asarray(rec.loss_mask)
    bad_mask = _first_bad(rec.loss_mask, (mask != 0) & (mask != 1))
    if bad_mask:
        errors.append(f"{label}: loss_mask[{bad_mask[0]}] is {bad_mask[1]} ({bad_mask[2]} value(s) not 0/1)")
    log_probs = np.asarray(rec.rollout_log_probs, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad_lp = _first_bad(rec.rollout_log_probs,
                            ~np.isfinite(log_probs) | (log_probs > LOGPROB_POSITIVE_TOLERANCE))
    if bad_lp:
        errors.append(f"{label}: rollout_log_probs[{bad_lp[0]}] is {bad_lp[1]!r} ({bad_lp[2]} value(s) not "
                      f"finite and <= {LOGPROB_POSITIVE_TOLERANCE:g}; log-probs are natural logs, <= 0)")
    recorded = rec.metadata.get("tokenizer", {}).get("vocab_size") if isinstance(
        rec.metadata.get("tokenizer"), dict) else None
    if recorded is not None and (isinstance(recorded, bool) or not isinstance(recorded, int) or recorded <= 0):
        errors.append(f"{label}: metadata['tokenizer']['vocab_size'] is {recorded!r}, expected an int > 0")
        recorded = None
    tokens = np.asarray(rec.tokens)
    limits = [(vocab_size, "the given vocab size"), (recorded, "metadata['tokenizer']['vocab_size']")]
    for limit, source in limits:
        if limit is None:
            continue
        bad_id = _first_bad(rec.tokens, (tokens < 0) | (tokens >= limit))
        if bad_id:
            errors.append(f"{label}: tokens[{bad_id[0]}] is {bad_id[1]}, outside [0, {limit}) set by {source} "
                          f"({bad_id[2]} id(s) out of range)")
    if vocab_size is None and recorded is None:
        bad_id = _first_bad(rec.tokens, tokens < 0)
        if bad_id:
            errors.append(f"{label}: tokens[{bad_id[0]}] is {bad_id[1]}; token ids must be >= 0")
    if not (math.isfinite(rec.reward_score) and 0.0 <= rec.reward_score <= 1.0):
        errors.append(f"{label}: reward_score is {rec.reward_score!r}, expected a value in [0, 1]")


def _check_metadata(rec: RolloutRecord, report: ValidationReport) -> None:
    label = rec.label
    meta = rec.metadata
    if "instance_id" in meta and meta["instance_id"] != rec.instance_id:
        report.errors.append(f"{label}: metadata['instance_id'] is {meta['instance_id']!r}, "
                             f"but the record's instance_id is {rec.instance_id!r}")
    if "_sample_idx" in meta and (isinstance(meta["_sample_idx"], bool) or not isinstance(meta["_sample_idx"], int)
                                  or meta["_sample_idx"] < 0):
        report.errors.append(f"{label}: metadata['_sample_idx'] is {meta['_sample_idx']!r}, expected an int >= 0")
    semantics = meta.get("logprob_semantics")
    if semantics is not None:
        report.errors.extend(_semantics_problems(label, semantics))
    reason = meta.get("_termination_reason")
    if reason is None:
        report.warnings.append(f"{label}: metadata['_termination_reason'] is missing")
    elif reason not in TERMINATION_REASONS:
        report.warnings.append(f"{label}: metadata['_termination_reason'] is {reason!r}, not one of "
                               f"{', '.join(TERMINATION_REASONS)}")
    elif (reason == "solved") != (rec.reward_score == 1.0):
        report.warnings.append(f"{label}: reward_score {rec.reward_score} disagrees with "
                               f"_termination_reason {reason!r}")


def _semantics_problems(label: str, semantics: object) -> list[str]:
    where = f"{label}: metadata['logprob_semantics']"
    if not isinstance(semantics, dict):
        return [f"{where} must be a dict with engine, temperature, top_p, top_p_renormalized"]
    problems = []
    if not isinstance(semantics.get("engine"), str) or not semantics.get("engine"):
        problems.append(f"{where}['engine'] must name the producer (e.g. 'hf', 'sglang', 'vllm:raw_logprobs')")
    temperature = semantics.get("temperature")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature > 0:
        problems.append(f"{where}['temperature'] is {temperature!r}, expected a number > 0")
    top_p = semantics.get("top_p", 1.0)
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
        problems.append(f"{where}['top_p'] is {top_p!r}, expected a number in (0, 1]")
    if not isinstance(semantics.get("top_p_renormalized", False), bool):
        problems.append(f"{where}['top_p_renormalized'] must be true or false")
    if not isinstance(semantics.get("constrained", False), bool):
        problems.append(f"{where}['constrained'] must be true or false")
    if semantics.get("constrained") and not isinstance(semantics.get("grammar"), str):
        problems.append(f"{where}['grammar'] must name the grammar the constrained log-probs were masked by")
    return problems


def validate_record_report(rec: RolloutRecord, *, vocab_size: int | None = None) -> ValidationReport:
    """Errors and warnings for one record; ``vocab_size`` is the scoring model's (e.g. the student's)."""
    report = ValidationReport()
    _check_lengths(rec, report.errors)
    _check_values(rec, vocab_size, report.errors)
    _check_metadata(rec, report)
    return report


def validate_record(rec: RolloutRecord, *, vocab_size: int | None = None) -> list[str]:
    """Errors for one record (empty when valid); each names the record and the field."""
    return validate_record_report(rec, vocab_size=vocab_size).errors


def _check_file(path: Path, dataset: str | None, instance_id: str | None, vocab_size: int | None,
                seen: dict[tuple[str, str, int], str], report: ValidationReport) -> list[RolloutRecord]:
    """Check one file's records into ``report``; returns the records that could be built. ``dataset`` and
    ``instance_id``: what the manifest lists for the file (None: a single-file cache, many instances)."""
    try:
        raw_records = load_file_dicts(path)
    except CacheFormatError as exc:
        report.errors.append(str(exc))
        return []
    built = []
    if len(raw_records) > 1 and any(not isinstance(meta := r.get("metadata"), dict) or "_sample_idx" not in meta
                                    for r in raw_records):
        report.errors.append(f"{path}: holds {len(raw_records)} samples, so each needs metadata['_sample_idx']")
    for position, data in enumerate(raw_records):
        try:
            rec = RolloutRecord.from_dict(data)
        except CacheFormatError as exc:
            report.errors.append(f"{path} sample {position}: {exc}")
            continue
        built.append(rec)
        if dataset is not None and (rec.dataset, rec.instance_id) != (dataset, instance_id):
            report.errors.append(f"{path}: holds {rec.label} but the manifest lists "
                                 f"{dataset}/{instance_id} (dataset/instance_id differ)")
        key = (rec.dataset, rec.instance_id, rec.sample_idx)
        if key in seen:
            report.errors.append(f"{rec.label}: duplicate (instance_id, _sample_idx), in {seen[key]} and {path}")
        seen[key] = str(path)
        report.extend(validate_record_report(rec, vocab_size=vocab_size))
    return built


def iter_validated_cache(cache_dir: Path | str | None, report: ValidationReport, *, vocab_size: int | None = None,
                         on_file: FileProgress | None = None) -> Iterator[RolloutRecord]:
    """Records of a cache in manifest order, one file in memory at a time, each checked into ``report``
    as it is read; ``report`` is complete (manifest against files, tokenizer fingerprints) only once the
    iterator is exhausted, so use what it yielded only when ``report.ok`` then."""
    folder = resolve_cache_source(cache_dir)
    if folder.is_file():  # a single-file Parquet cache: every record in one file, no manifest
        if on_file is not None:
            on_file(0, 1)  # one file: its progress reads 0/1, then 1/1 when done
        records = _check_file(folder, None, None, vocab_size, {}, report)
        _check_fingerprints(declared_fingerprints(records), report)
        yield from records
        return
    try:
        entries = read_manifest(folder)
    except CacheFormatError as exc:
        report.errors.append(str(exc))
        return
    listed: dict[Path, int] = {}
    seen: dict[tuple[str, str, int], str] = {}
    fingerprints: set[str] = set()
    for index, entry in enumerate(entries):
        if on_file is not None:
            on_file(index, len(entries))
        path = entry_file(folder, entry)
        resolved = path.resolve()
        if resolved in listed:
            report.errors.append(f"{MANIFEST_NAME} entries {listed[resolved]} and {index} both list {entry.path}")
            continue
        listed[resolved] = index
        if not path.is_file():
            report.errors.append(f"{MANIFEST_NAME} entry {index} ({entry.dataset}/{entry.instance_id}): "
                                 f"file {entry.path} is missing")
            continue
        records = _check_file(path, entry.dataset, entry.instance_id, vocab_size, seen, report)
        fingerprints |= declared_fingerprints(records)
        yield from records
    for path in sorted(folder.rglob("*")):
        if path.suffix in (".pt", ".parquet") and path.is_file() and path.resolve() not in listed:
            report.errors.append(f"{path.relative_to(folder)}: file is not listed in {MANIFEST_NAME}")
    _check_fingerprints(fingerprints, report)


def _check_fingerprints(fingerprints: set[str], report: ValidationReport) -> None:
    if len(fingerprints) > 1:
        report.errors.append(f"the records were tokenized by {len(fingerprints)} different tokenizers (fingerprints "
                             f"{', '.join(sorted(fingerprints))}); one cache holds one tokenizer's ids")


def load_validated_cache(cache_dir: Path | str | None = None, *, vocab_size: int | None = None,
                         on_file: FileProgress | None = None) -> tuple[list[RolloutRecord], ValidationReport]:
    """Read and validate a cache in one pass (each file is loaded once); records in manifest order.

    Use the records only when ``report.ok``: with errors, the list holds what could be built.
    ``on_file(files_started, files_total)`` is called as each manifest entry is checked.
    """
    report = ValidationReport()
    records = list(iter_validated_cache(cache_dir, report, vocab_size=vocab_size, on_file=on_file))
    return records, report


def validate_cache_report(cache_dir: Path | str | None = None, *, vocab_size: int | None = None,
                          on_file: FileProgress | None = None) -> ValidationReport:
    """Errors and warnings for a whole cache: every record, and manifest against files both ways."""
    return load_validated_cache(cache_dir, vocab_size=vocab_size, on_file=on_file)[1]


def validate_cache(cache_dir: Path | str | None = None, *, vocab_size: int | None = None) -> list[str]:
    """Errors for a cache folder (None: ``$KL_EVAL_TEACHER_CACHE_DIR``); empty when it is valid."""
    return validate_cache_report(cache_dir, vocab_size=vocab_size).errors
