"""One divergence run: score every student (and optionally the teacher) against a cache, resumably.

Order of work, one model in memory at a time: each student scores the cache's teacher samples and,
when a teacher is given, samples its own continuations of the cached prompts and scores them; then
the teacher (a local model or a completions server) scores every student's samples, and optionally
re-scores the cache (its noise floor). Every scored array and every sample set is saved under
``work_dir`` as soon as it exists, keyed by a digest of what produced it, so a re-run after a crash
skips finished work.
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

import numpy as np

from pdbgym.divergence.loading import check_vocab, load_tokenizer_if_any
from pdbgym.divergence.report import SampleSet, StudentScores
from pdbgym.divergence.sampling import sample_continuations
from pdbgym.divergence.scoring import ScoringConfig, masked_rollout_logprobs, score_records
from pdbgym.divergence.semantics import check_teacher_logprobs
from pdbgym.divergence.server_teacher import check_server_semantics, score_records_with_server
from pdbgym.errors import PdbgymError
from pdbgym.fileio import atomic_target
from pdbgym.modelload import load_causal_lm
from pdbgym.policyname import is_server_url
from pdbgym.rollouts.cache import MANIFEST_NAME, read_cache, write_cache
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord, SemanticsDict

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedModel


class DivergenceInputError(PdbgymError):
    """A divergence run was asked for something it cannot do."""


Scorer = Callable[["PreTrainedModel", Sequence[RolloutRecord], LogprobSemantics, ScoringConfig], list[np.ndarray]]
Sampler = Callable[..., list[RolloutRecord]]  # sample_continuations' signature


def _same(found: bool) -> bool:
    return found


@dataclass
class Execution:
    """Where scoring and sampling run: in this process (the default) or over data-parallel ranks.

    score/sample: ``score_records`` / ``sample_continuations`` or drop-ins with their signatures that
    return the same values. writes: this process writes ``work_dir`` (one rank of several does).
    agree: turns this process's "result already stored?" into the answer every process acts on (rank
    0's), so all ranks enter the same collectives.
    """

    score: Scorer = score_records
    sample: Sampler = sample_continuations
    writes: bool = True
    agree: Callable[[bool], bool] = _same


@dataclass
class DivergenceRun:
    """What to compare. ``students`` and a non-URL ``teacher`` are local model paths (folder or .gguf).

    teacher: None (cache-only: KL(teacher || student) from the cached samples), a local path, or an
        http(s) URL of an OpenAI-compatible server (``server_model`` names its model).
    noise_floor: also score the teacher model against the cache, as a row named ``teacher:<name>``.
    rescore_teacher: use the teacher model's own log-probs instead of the cached ones as lT.
    teacher_device_map: load a local teacher spread over the visible GPUs (``modelload.DEVICE_MAPS``).
    dtype: the dtype local models are loaded in (``float32``...); None: bf16 on CUDA, fp32 elsewhere.
    """

    records: list[RolloutRecord]
    semantics: LogprobSemantics
    students: list[str]
    teacher: str | None = None
    server_model: str = "teacher"
    student_samples: bool = True
    max_new_tokens: int = 512
    noise_floor: bool = False
    rescore_teacher: bool = False
    device: str | None = None
    teacher_device_map: str | None = None
    dtype: str | None = None
    work_dir: Path | None = None
    seed: int = 0
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    execution: Execution = field(default_factory=Execution)

    @property
    def teacher_is_server(self) -> bool:
        return self.teacher is not None and is_server_url(self.teacher)


def records_digest(records: Sequence[RolloutRecord]) -> str:
    digest = hashlib.sha256()
    for record in records:
        digest.update(f"{record.dataset}/{record.instance_id}#{record.sample_idx}:{record.prompt_len}".encode())
        digest.update(np.asarray(record.tokens, dtype=np.int64).tobytes())
        digest.update(np.asarray(record.loss_mask, dtype=np.int8).tobytes())
    return digest.hexdigest()[:16]


class ScoreKey(TypedDict, total=False):
    """What produced stored scores or samples (hashed into their key): the role, the model, the transform, the
    records' digest, and where they apply the dtype asked for, the seed and the sampling length."""

    role: str
    model: str
    semantics: SemanticsDict
    records: str
    dtype: str
    seed: int
    max_new_tokens: int


class DtypeKey(TypedDict, total=False):
    dtype: str


class ScoreStore:
    """Scored arrays and sample caches under one folder, keyed by what produced them (None: no saving)."""

    def __init__(self, folder: Path | None, execution: Execution | None = None) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.execution = execution or Execution()

    @staticmethod
    def key(**parts: Unpack[ScoreKey]) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]

    def arrays(self, key: str, compute: Callable[[], list[np.ndarray]]) -> list[np.ndarray]:
        if self.folder is None:
            return compute()
        path = self.folder / f"scores-{key}.npz"
        if self.execution.agree(path.exists()):
            with np.load(path) as data:
                return [data[f"arr_{i}"] for i in range(len(data.files))]
        arrays = compute()
        if self.execution.writes:
            with atomic_target(path) as tmp, open(tmp, "wb") as handle:
                np.savez(handle, *arrays)
        return arrays

    def samples(self, key: str, compute: Callable[[], list[RolloutRecord]]) -> list[RolloutRecord]:
        if self.folder is None:
            return compute()
        folder = self.folder / f"samples-{key}"
        # The manifest is written last: present means complete.
        if self.execution.agree((folder / MANIFEST_NAME).exists()):
            return read_cache(folder)
        samples = compute()
        if not self.execution.writes:
            return samples
        write_cache(folder, samples, overwrite=True)
        return read_cache(folder)


def model_label(spec: str) -> str:
    return spec.rstrip("/") if is_server_url(spec) else Path(spec).name


def unique_names(specs: Sequence[str]) -> list[str]:
    names: list[str] = []
    for spec in specs:
        base, name, n = model_label(spec), model_label(spec), 2
        while name in names:
            name, n = f"{base}#{n}", n + 1
        names.append(name)
    return names


class LazyModel:
    """Loads the model at first use, so a resumed run whose results are all stored loads nothing."""

    def __init__(self, spec: str, device: str | None, label: str, records: Sequence[RolloutRecord],
                 device_map: str | None = None, dtype: str | None = None) -> None:
        self.spec, self.device, self.label, self.records = spec, device, label, records
        self.device_map, self.dtype = device_map, dtype
        self._model: PreTrainedModel | None = None

    def get(self) -> PreTrainedModel:
        if self._model is None:
            self._model = load_causal_lm(self.spec, self.device, self.dtype, device_map=self.device_map)
            check_vocab(self._model, self.records, self.label, load_tokenizer_if_any(self.spec))
        return self._model

    def release(self) -> None:
        if self._model is None:
            return
        import torch  # optional: torch (pdbgym[hf])

        self._model = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _score_with_model(run: DivergenceRun, store: ScoreStore, role: str, model: LazyModel,
                      records: list[RolloutRecord]) -> list[np.ndarray]:
    # A dtype asked for is part of what produced the scores (None, the default, keeps the older keys).
    extra: DtypeKey = {"dtype": model.dtype} if model.dtype is not None else {}
    key = store.key(role=role, model=str(Path(model.spec).resolve()), semantics=run.semantics.to_dict(),
                    records=records_digest(records), **extra)
    run.scoring.progress_label = f"{model.label}: {role}"
    return store.arrays(key, lambda: run.execution.score(model.get(), records, run.semantics, run.scoring))


def run_divergence(run: DivergenceRun) -> list[StudentScores]:
    """Score everything ``run`` asks for; returns one ``StudentScores`` per student (+ noise floor)."""
    if not run.students:
        raise DivergenceInputError("give at least one student model (--student PATH)")
    wants_teacher_on_cache = run.noise_floor or run.rescore_teacher
    if wants_teacher_on_cache and (run.teacher is None or run.teacher_is_server):
        raise DivergenceInputError(
            "--noise-floor and --rescore-teacher need a local teacher model (--teacher PATH), not a URL"
        )
    if run.teacher_is_server:
        check_server_semantics(run.semantics)
    # The cached values stand for the teacher unless the teacher re-scores the cache and no row uses them.
    check_teacher_logprobs(run.semantics, rescored=run.rescore_teacher and not run.noise_floor)
    store = ScoreStore(run.work_dir, run.execution)
    cache_teacher = [masked_rollout_logprobs(r) for r in run.records]
    task_ids = [r.instance_id for r in run.records]
    wants_samples = run.teacher is not None and run.student_samples
    names = unique_names(run.students)
    on_cache: dict[str, list[np.ndarray]] = {}
    samples: dict[str, list[RolloutRecord]] = {}
    for name, spec in zip(names, run.students, strict=True):
        model = LazyModel(spec, run.device, f"student {name}", run.records, dtype=run.dtype)
        on_cache[name] = _score_with_model(run, store, "on cache", model, run.records)
        if wants_samples:
            key = store.key(role="student-samples", model=str(Path(spec).resolve()), seed=run.seed,
                            semantics=run.semantics.to_dict(), max_new_tokens=run.max_new_tokens,
                            records=records_digest(run.records))
            samples[name] = store.samples(key, lambda m=model, n=name: run.execution.sample(
                m.get(), run.records, run.semantics, run.max_new_tokens, f"student:{n}", run.seed, run.scoring))
        model.release()
    teacher_on_samples, teacher_on_cache = _teacher_scores(run, store, samples)
    reference = teacher_on_cache if run.rescore_teacher and teacher_on_cache is not None else cache_teacher
    results = []
    for name in names:
        student_set = None
        if name in samples:
            student_set = SampleSet([r.instance_id for r in samples[name]], teacher_on_samples[name],
                                    [np.asarray(r.rollout_log_probs, dtype=np.float64) for r in samples[name]])
        results.append(StudentScores(name, SampleSet(task_ids, reference, on_cache[name]), student_set))
    if teacher_on_cache is not None:
        label = f"teacher:{model_label(run.teacher or '')}"
        results.append(StudentScores(label, SampleSet(task_ids, cache_teacher, teacher_on_cache)))
    return results


def _teacher_scores(
    run: DivergenceRun, store: ScoreStore, samples: dict[str, list[RolloutRecord]]
) -> tuple[dict[str, list[np.ndarray]], list[np.ndarray] | None]:
    """The teacher's log-probs on each student's samples, and on the cache when asked for."""
    wants_cache = run.noise_floor or run.rescore_teacher
    if run.teacher is None or (not samples and not wants_cache):
        return {}, None
    if run.teacher_is_server:
        scored = {}
        for name, recs in samples.items():
            key = store.key(role=f"server on {name} samples", model=f"{run.teacher}#{run.server_model}",
                            semantics=run.semantics.to_dict(), records=records_digest(recs))
            scored[name] = store.arrays(key, lambda r=recs: score_records_with_server(
                run.teacher or "", run.server_model, r, run.semantics))
        return scored, None
    model = LazyModel(run.teacher, run.device, "the teacher", run.records, run.teacher_device_map, run.dtype)
    scored = {name: _score_with_model(run, store, f"on {name} samples", model, recs)
              for name, recs in samples.items()}
    on_cache = _score_with_model(run, store, "on cache", model, run.records) if wants_cache else None
    model.release()
    return scored, on_cache
