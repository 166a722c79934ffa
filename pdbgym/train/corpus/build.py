"""SFT corpora: token-exact training examples from rollout records (and chat JSONL trajectories).

An example is ``input_ids`` (the record's ``tokens``, unchanged: never decoded and re-encoded) and
``assistant_masks`` of the same length: 0 on the prompt (``prompt_len`` ids), then the record's
``loss_mask`` (1 on model-generated ids, 0 on tool output and chat-template ids). TRL's SFTTrainer turns
this pair into labels (``-100`` where the mask is 0), so the loss is over ``loss_mask == 1`` ids only.

A corpus folder holds ``examples.jsonl`` (one example a line) and ``corpus.json`` (the manifest: what
was read, kept and dropped by reason, token counts, the tokenizer fingerprint, the content hash), both
written atomically, the manifest last.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from pdbgym.agent.policies import tokenizer_named
from pdbgym.errors import PdbgymError
from pdbgym.fileio import write_json_atomic
from pdbgym.rollouts.cache import iter_cache
from pdbgym.rollouts.record import RolloutRecord, tokenizer_fingerprint
from pdbgym.rollouts.validate import validate_record
from pdbgym.tasks.splits import load_splits
from pdbgym.train.corpus.chat_jsonl import read_chat_jsonl
from pdbgym.train.corpus.example import Example, read_examples, write_examples

if TYPE_CHECKING:  # annotations only: transformers loads with a tokenizer
    from transformers import PreTrainedTokenizerBase

EXAMPLES_FILE = "examples.jsonl"
MANIFEST_FILE = "corpus.json"
CORPUS_FORMAT = "pdbgym-sft-corpus/1"
OVERLENGTH = ("drop", "truncate")
HELD_OUT_SPLITS = ("val", "test")


class TokenizerId(TypedDict):
    """The tokenizer a corpus' ids belong to: its fingerprint (``rollouts.record.tokenizer_fingerprint``) and
    name (None where the records carried none)."""

    fingerprint: str | None
    name: str | None


class CorpusSources(TypedDict, total=False):
    """Where a corpus' examples came from: rollout caches and JSONL files (``pdbgym train corpus``), a DAgger
    run's folder, or the corpus a matched control was drawn from (``experiment.arms``)."""

    caches: list[str]
    jsonl: list[str]
    dagger: str
    matched_to: str


class CorpusFilters(TypedDict, total=False):
    """The filters ``pdbgym train corpus`` applied (none for a corpus made otherwise)."""

    solved_only: bool
    dedupe: bool
    max_length: int | None
    overlength: str
    splits: str | None


class CorpusExtra(TypedDict, total=False):
    """What the maker of a corpus adds to its manifest."""

    sources: CorpusSources
    filters: CorpusFilters
    records_read: int
    dropped: dict[str, int]  # reason -> examples dropped
    iteration: int  # DAgger: the iteration whose labels these are


class CorpusManifest(CorpusExtra):
    """``corpus.json``: what a corpus holds, its tokenizer and its content hash."""

    format: str
    examples_kept: int
    truncated: int
    tokens: int
    loss_tokens: int
    task_ids: list[str]
    tokenizer: TokenizerId
    content_hash: str


class CorpusError(PdbgymError):
    """A corpus cannot be built or read, or would hold data it must not."""


@dataclass
class CorpusConfig:
    """What ``pdbgym train corpus`` takes.

    ``caches``: teacher-cache folders (``manifest.json`` + files) of rollout records.
    ``jsonl``: chat / SWE-bench-style trajectory files (see :mod:`pdbgym.train.corpus.chat_jsonl`), tokenized
    with ``tokenizer`` (``embedded`` or a model/tokenizer folder), required when ``jsonl`` is given.
    ``max_length`` (ids, prompt included): longer examples are dropped (``overlength="drop"``) or cut to
    their first ``max_length`` ids (``"truncate"``; the cut-off end, usually the final turns, is lost and
    an example left with no loss id is dropped). ``splits``: a split file; any record of a val/test task
    makes the build fail, naming the tasks.
    """

    caches: list[Path]
    out: Path
    jsonl: list[Path] = field(default_factory=list)
    tokenizer: str | None = None
    solved_only: bool = False
    dedupe: bool = True
    max_length: int | None = None
    overlength: str = "drop"
    splits: Path | None = None
    keep_tampered: bool = False


def example_from_record(record: RolloutRecord, source: str) -> Example:
    """The record's ids as they are; mask = prompt zeros + ``loss_mask``. Malformed records are refused."""
    problems = validate_record(record)
    if problems:
        raise CorpusError(f"{source}: record {record.label} is malformed: {'; '.join(problems[:3])}")
    mask = [0] * record.prompt_len + [1 if bit else 0 for bit in record.loss_mask]
    solved = bool(record.reward_extra.get("final_test_passed", record.reward_score >= 1.0))
    return Example(record.instance_id, record.dataset, record.sample_idx, source, solved, list(record.tokens), mask,
                   termination_reason=record.termination_reason)


def held_out_tasks(splits_file: Path) -> dict[str, str]:
    """instance_id -> split name, for every task a split file puts in val or test."""
    splits = load_splits(splits_file)
    return {item["instance_id"]: name for name in HELD_OUT_SPLITS for item in splits.get(name, [])}


def refuse_held_out(task_ids: Iterable[str], splits_file: Path | None, what: str = "training data") -> None:
    """Raise ``CorpusError`` naming every val/test task of ``splits_file`` among ``task_ids``."""
    if splits_file is None:
        return
    held = held_out_tasks(splits_file)
    leaked = sorted({task_id for task_id in task_ids if task_id in held})
    if leaked:
        listed = ", ".join(f"{task_id} ({held[task_id]})" for task_id in leaked[:20])
        raise CorpusError(f"refusing to put {len(leaked)} held-out task(s) of {splits_file} into {what}: {listed}. "
                          "Build the rollouts from the train split's tasks only (pdbgym tasks split), or "
                          "leave those tasks out of the caches.")


def _fingerprint_of(record: RolloutRecord) -> str | None:
    tok = record.metadata.get("tokenizer")
    return str(tok["fingerprint"]) if isinstance(tok, dict) and tok.get("fingerprint") else None


def _load_sources(config: CorpusConfig) -> tuple[list[Example], dict[str, str], int]:
    """Examples from every source, the tokenizer (fingerprint -> name) they carry, records read."""
    examples: list[Example] = []
    tokenizers: dict[str, str] = {}
    unknown = 0
    for cache in config.caches:
        for record in iter_cache(cache):
            fingerprint = _fingerprint_of(record)
            if fingerprint is None:
                unknown += 1
            else:
                tokenizers[fingerprint] = str((record.metadata.get("tokenizer") or {}).get("name") or "?")
            examples.append(example_from_record(record, str(cache)))
    if config.jsonl:
        if not config.tokenizer:
            raise CorpusError("--jsonl trajectories are text: give --tokenizer (embedded, or a model folder) "
                              "to tokenize them with")
        tokenizer = tokenizer_named(config.tokenizer)
        tokenizers[tokenizer_fingerprint(tokenizer)] = str(getattr(tokenizer, "name_or_path", "") or "?")
        for path in config.jsonl:
            examples.extend(read_chat_jsonl(path, tokenizer))
    if len(tokenizers) > 1:
        listed = ", ".join(f"{name} ({fp})" for fp, name in sorted(tokenizers.items()))
        raise CorpusError(f"the sources were tokenized by {len(tokenizers)} tokenizers ({listed}); an SFT corpus "
                          "holds one tokenizer's ids. Build one corpus per tokenizer.")
    if unknown and tokenizers:
        raise CorpusError(f"{unknown} record(s) carry no tokenizer fingerprint while others carry "
                          f"{next(iter(tokenizers))}; their ids cannot be shown to share one vocabulary")
    return examples, tokenizers, len(examples)


def _apply_length(example: Example, max_length: int | None, overlength: str) -> str | None:
    """Cut or judge one example against ``max_length``; return a drop reason or None to keep it."""
    if max_length is None or len(example.input_ids) <= max_length:
        return None
    if overlength == "drop":
        return "over_max_length"
    example.input_ids = example.input_ids[:max_length]
    example.assistant_masks = example.assistant_masks[:max_length]
    example.truncated = True
    return None if example.loss_tokens else "no_loss_tokens_after_truncation"


def select_examples(examples: list[Example], config: CorpusConfig) -> tuple[list[Example], Counter[str]]:
    """Filters in order: tampered, solved-only, no loss ids, length, duplicates. Returns kept, drop counts."""
    dropped: Counter[str] = Counter()
    kept: list[Example] = []
    seen: set[str] = set()
    for example in examples:
        reason = None
        if example.termination_reason == "tampered" and not config.keep_tampered:
            reason = "tampered"
        elif config.solved_only and not example.solved:
            reason = "unsolved"
        elif not example.loss_tokens:
            reason = "no_loss_tokens"
        else:
            reason = _apply_length(example, config.max_length, config.overlength)
        if reason is None and config.dedupe:
            digest = example.content_hash
            reason = "duplicate" if digest in seen else None
            seen.add(digest)
        if reason is None:
            kept.append(example)
        else:
            dropped[reason] += 1
    return kept, dropped


def corpus_hash(examples: Iterable[Example]) -> str:
    """sha256 over the examples' content hashes in corpus order (the order training reads them)."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(example.content_hash.encode() + b"\n")
    return digest.hexdigest()


def build_corpus(config: CorpusConfig) -> CorpusManifest:
    """Read, check, filter and write a corpus; return its manifest (also written as ``corpus.json``)."""
    if config.overlength not in OVERLENGTH:
        raise CorpusError(f"--overlength must be one of {OVERLENGTH}, got {config.overlength!r}")
    if not config.caches and not config.jsonl:
        raise CorpusError("give at least one --cache DIR or --jsonl FILE")
    examples, tokenizers, read = _load_sources(config)
    refuse_held_out((e.instance_id for e in examples), config.splits)
    kept, dropped = select_examples(examples, config)
    fingerprint = next(iter(tokenizers), None)
    sources: CorpusSources = {"caches": [str(p) for p in config.caches], "jsonl": [str(p) for p in config.jsonl]}
    filters: CorpusFilters = {"solved_only": config.solved_only, "dedupe": config.dedupe, "max_length": config.max_length,
               "overlength": config.overlength, "splits": str(config.splits) if config.splits else None}
    return write_corpus(config.out, kept, {"fingerprint": fingerprint, "name": tokenizers.get(fingerprint or "")},
                        {"sources": sources, "filters": filters, "records_read": read,
                         "dropped": dict(sorted(dropped.items()))})


def write_corpus(out: Path, examples: list[Example], tokenizer: TokenizerId,
                 extra: CorpusExtra | None = None) -> CorpusManifest:
    """Write ``examples`` (sorted by task, dataset, sample, hash) and their manifest; return the manifest."""
    kept = sorted(examples, key=lambda e: (e.instance_id, e.dataset, e.sample_idx, e.content_hash))
    if not kept:
        raise CorpusError(f"no example survived the filters ({(extra or {}).get('dropped', {})}); nothing to write")
    manifest: CorpusManifest = {
        "format": CORPUS_FORMAT, **(extra or {}), "examples_kept": len(kept),
        "truncated": sum(e.truncated for e in kept),
        "tokens": sum(len(e.input_ids) for e in kept), "loss_tokens": sum(e.loss_tokens for e in kept),
        "task_ids": sorted({e.instance_id for e in kept}), "tokenizer": tokenizer, "content_hash": corpus_hash(kept),
    }
    out = Path(out)
    write_examples(out / EXAMPLES_FILE, kept)
    write_json_atomic(out / MANIFEST_FILE, manifest, indent=2)
    return manifest


@dataclass
class Corpus:
    """A corpus read back: its manifest and examples, in corpus order."""

    path: Path
    manifest: CorpusManifest
    examples: list[Example]

    @property
    def fingerprint(self) -> str | None:
        tokenizer = self.manifest.get("tokenizer")
        return tokenizer.get("fingerprint") if tokenizer else None


def load_corpus(path: Path | str) -> Corpus:
    """Read a corpus folder, checking its content hash against the manifest (a changed file is refused)."""
    folder = Path(path)
    manifest_path, examples_path = folder / MANIFEST_FILE, folder / EXAMPLES_FILE
    if not manifest_path.is_file() or not examples_path.is_file():
        raise CorpusError(f"{folder} is not a corpus folder (needs {MANIFEST_FILE} and {EXAMPLES_FILE}); "
                          "build one with `pdbgym train corpus`")
    manifest: CorpusManifest = json.loads(manifest_path.read_text())
    examples = read_examples(examples_path)
    actual = corpus_hash(examples)
    if actual != manifest.get("content_hash"):
        raise CorpusError(f"{examples_path} hashes to {actual[:12]} but {manifest_path} records "
                          f"{str(manifest.get('content_hash'))[:12]}: the corpus changed after it was built; rebuild it")
    return Corpus(folder, manifest, examples)


def check_corpus_tokenizer(corpus: Corpus, tokenizer: PreTrainedTokenizerBase, model_label: str) -> None:
    """Refuse a corpus whose recorded tokenizer fingerprint is not ``tokenizer``'s."""
    ours = tokenizer_fingerprint(tokenizer)
    theirs = corpus.fingerprint
    if theirs is None:
        raise CorpusError(f"{corpus.path} records no tokenizer fingerprint, so its ids cannot be shown to be "
                          f"{model_label}'s; rebuild it from records that carry metadata.tokenizer")
    if theirs != ours:
        raise CorpusError(f"{corpus.path} was tokenized by {corpus.manifest['tokenizer'].get('name')} (fingerprint "
                          f"{theirs}) but {model_label}'s tokenizer has fingerprint {ours}: its ids would be read as "
                          "other tokens. Build the corpus from rollouts of a model sharing this tokenizer.")


def split_by_task(examples: list[Example], val_fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, val) with whole tasks on one side: ``round(val_fraction * tasks)`` task ids (at least one
    when ``val_fraction > 0`` and two or more tasks exist), drawn with ``seed``."""
    if not 0 <= val_fraction < 1:
        raise CorpusError(f"--val-fraction must be in [0, 1), got {val_fraction}")
    tasks = sorted({e.instance_id for e in examples})
    count = round(val_fraction * len(tasks))
    if val_fraction > 0 and len(tasks) >= 2:
        count = min(max(count, 1), len(tasks) - 1)
    held = set(random.Random(seed).sample(tasks, count)) if count else set()
    return [e for e in examples if e.instance_id not in held], [e for e in examples if e.instance_id in held]
