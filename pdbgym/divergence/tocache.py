"""KL(teacher || model) on a teacher cache: the one entry point for code outside the divergence library.

``kl_to_cache(model_or_ref, cache) -> KLToCache`` is what the evaluation's arms
(``evaluate.divergence_arms``), the experiment's KL to the oracle (``evaluate.arm_figures.oracle_kl``) and
DAgger's per-iteration KL (``train.dagger.scores.kl_to_cache``) compute, so the three give the same number
for the same model and cache.

The one aggregation: the divergence library's ``token_mean`` of the per-token estimator terms, i.e.
every scored (``loss_mask`` 1) token of the cache pooled, the sum of the terms over the number of
finite terms (non-finite ones are left out and their share reported), with a 95% task-level bootstrap
interval (tasks resampled with replacement: the runs of one task are one cluster). It is the metric
``kl_teacher_student/<estimator>/token_mean`` of ``pdbgym divergence`` and ``pdbgym eval
--teacher-cache`` (docs/metrics.md), in nats per teacher token. The estimator is k3 (the library's
headline) except for a deterministic teacher (semantics engine ``deterministic``: the scripted oracle),
whose probability 1 on each of its tokens makes k1 = -log q(token | context) exact (k3 reads low there).
Every other named metric of the library's report (k1/k2/k3 x token_mean/sequence_mean/sequence_sum) is in
``KLToCache.metrics``; each task's own token mean in ``per_task``.

The cache is validated, its log-prob transform settled from its own declaration, and caches whose
log-probs cannot stand for the teacher's (grammar-constrained, engine ``none``) are refused before any
model loads.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pdbgym.divergence.compare import load_records
from pdbgym.divergence.loading import VocabMismatchError, check_vocab
from pdbgym.divergence.pipeline import DivergenceRun, run_divergence
from pdbgym.divergence.report import (
    HEADLINE,
    DivergenceReport,
    MetricValue,
    ReportConfig,
    ReportContext,
    SampleSet,
    StudentEntry,
    StudentScores,
    build_report,
    student_statistics,
)
from pdbgym.divergence.scoring import ScoringConfig, masked_rollout_logprobs, score_records
from pdbgym.divergence.semantics import check_teacher_logprobs, resolve_semantics
from pdbgym.errors import PdbgymError
from pdbgym.fileio import JSONValue
from pdbgym.modelload import model_path
from pdbgym.rollouts.record import LogprobSemantics, RolloutRecord

if TYPE_CHECKING:  # annotations only: transformers loads with a model
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["HEADLINE", "KLToCache", "TeacherCache", "VocabMismatchError", "headline_metric",
           "kl_of", "kl_report", "kl_to_cache", "open_teacher_cache", "score_on_cache", "score_with_samples"]


def headline_metric(semantics: LogprobSemantics) -> str:
    """``kl_teacher_student/k1/token_mean`` for a deterministic teacher, else the library's headline (k3)."""
    return "kl_teacher_student/k1/token_mean" if semantics.engine == "deterministic" else HEADLINE


@dataclass(frozen=True)
class TeacherCache:
    """A validated teacher cache: its folder, the records scored, and the transform they are scored under."""

    folder: Path
    records: list[RolloutRecord]
    semantics: LogprobSemantics
    max_ids: int = 0

    @property
    def metric(self) -> str:
        return headline_metric(self.semantics)

    @property
    def context(self) -> ReportContext:
        """What the divergence report records about the cache."""
        return {"cache": str(self.folder), "n_records": len(self.records), "semantics": self.semantics.to_dict()}


@dataclass(frozen=True)
class KLToCache:
    """KL(teacher || model) on a teacher cache (module docstring: the aggregation and the estimator).

    ``value``, ``ci_low``, ``ci_high``: ``metric`` in nats per teacher token (None when no term is
    finite). ``n_tokens``: scored tokens (non-finite ones included, ``nonfinite_share`` of them).
    ``per_task``: each task's token mean of the same estimator. ``metrics``: every metric of the library's
    report entry (``{"value", "ci_low", "ci_high"}`` by name).
    """

    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n_records: int
    n_tasks: int
    n_tokens: int
    nonfinite_share: float
    per_task: dict[str, float | None]
    metrics: dict[str, MetricValue]

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-ready copy of exactly these fields, in their order."""
        return dataclasses.asdict(self)


def first_ids(record: RolloutRecord, max_ids: int) -> RolloutRecord:
    """``record`` cut to its first ``max_ids`` ids (0: whole), its mask and log-probs with it."""
    if not max_ids or len(record.tokens) <= max_ids:
        return record
    keep = max(0, max_ids - record.prompt_len)
    return dataclasses.replace(record, tokens=record.tokens[:max_ids], response_length=keep,
                               loss_mask=record.loss_mask[:keep], rollout_log_probs=record.rollout_log_probs[:keep])


def open_teacher_cache(cache: Path | str | TeacherCache, max_records: int | None = None,
                       max_ids: int = 0) -> TeacherCache:
    """The cache checked and read: validated, its declared transform, refused when its log-probs are not
    a model's (``NotModelLogprobsError``). ``max_records``: the first N records; ``max_ids`` (0: whole
    records): only the first ids of each record (prompt included), records left with no scored id dropped."""
    if isinstance(cache, TeacherCache):
        return cache
    folder, records = load_records(Path(cache), max_records)
    semantics = resolve_semantics(records, None)
    check_teacher_logprobs(semantics)  # a constrained or log-prob-less cache, before any model loads
    if max_ids < 0:
        raise PdbgymError(f"max_ids must be 0 (whole records) or more, got {max_ids}")
    if max_ids:
        records = [r for r in (first_ids(r, max_ids) for r in records) if any(r.loss_mask)]
    if not any(any(r.loss_mask) for r in records):
        window = f" in the first {max_ids} ids of its records" if max_ids else ""
        raise PdbgymError(f"the cache {folder} holds no scored token (loss_mask 1){window}: nothing to compare; "
                          "give a cache of model turns" + (" or a larger window" if max_ids else ""))
    return TeacherCache(folder, records, semantics, max_ids)


def score_on_cache(model_or_ref: PreTrainedModel | str | os.PathLike[str], target: TeacherCache, name: str = "model", *,
                   tokenizer: PreTrainedTokenizerBase | None = None,
                   device: str | None = None, dtype: str | None = None, work_dir: Path | None = None,
                   seed: int = 0, show_progress: bool = False) -> StudentScores:
    """The model's log-probs of the cache's teacher tokens, beside the cached teacher log-probs.

    ``model_or_ref``: a loaded HF causal LM (checked against the cache with its ``tokenizer`` when given),
    or a reference (``pdbgym.modelload``: a folder, a .gguf, ``embedded``, a registered store name),
    loaded in ``dtype`` on ``device`` by the divergence pipeline, whose ``work_dir`` keeps the scored
    arrays (a rerun loads no model). Raises ``ModelLoadError`` / ``VocabMismatchError`` before scoring.
    """
    scoring = ScoringConfig(show_progress=show_progress)
    if isinstance(model_or_ref, str | os.PathLike):
        run = DivergenceRun(target.records, target.semantics, [str(model_path(model_or_ref))], device=device,
                            dtype=dtype, work_dir=work_dir, seed=seed, scoring=scoring)
        (scores,) = run_divergence(run)
        return dataclasses.replace(scores, name=name)
    check_vocab(model_or_ref, target.records, name, tokenizer)
    scoring.progress_label = f"{name}: on cache"
    student = score_records(model_or_ref, target.records, target.semantics, scoring)
    teacher = [masked_rollout_logprobs(r) for r in target.records]
    return StudentScores(name, SampleSet([r.instance_id for r in target.records], teacher, student))


def score_with_samples(model_refs: Sequence[str], target: TeacherCache, teacher: str, names: Sequence[str], *,
                       max_new_tokens: int, device: str | None = None, dtype: str | None = None,
                       work_dir: Path | None = None, seed: int = 0, show_progress: bool = False) -> list[StudentScores]:
    """``score_on_cache`` plus each model's own samples scored by ``teacher``: KL(student || teacher) and JSD.

    Each model continues every cached prompt once (``sampling.generate_samples``: at most ``max_new_tokens``
    ids, under the cache's transform, seed ``seed``), scores its samples itself, and the local ``teacher``
    (loaded once, after the models) scores them too: the run ``pdbgym divergence --teacher`` does, so the
    same models, cache, teacher and seed give the same figures. ``names[i]`` names ``model_refs[i]``'s
    scores. Raises ``ModelLoadError`` / ``VocabMismatchError`` (a model or the teacher) before scoring with it.
    """
    run = DivergenceRun(target.records, target.semantics, [str(model_path(m)) for m in model_refs],
                        teacher=str(model_path(teacher)), student_samples=True, max_new_tokens=max_new_tokens,
                        device=device, dtype=dtype, work_dir=work_dir, seed=seed,
                        scoring=ScoringConfig(show_progress=show_progress))
    scores = run_divergence(run)
    return [dataclasses.replace(s, name=name) for s, name in zip(scores, names, strict=True)]


def kl_report(scores: Sequence[StudentScores], target: TeacherCache, bootstrap: int = ReportConfig.n_resamples,
              seed: int = 0) -> DivergenceReport:
    """The divergence library's report of ``scores`` (one entry per model, paired differences between them)."""
    return build_report(scores, ReportConfig(n_resamples=bootstrap, seed=seed, context=target.context))


def kl_of(scores: StudentScores, entry: StudentEntry, target: TeacherCache) -> KLToCache:
    """The ``KLToCache`` of one model from its scores and its entry of ``kl_report``."""
    metric = target.metric
    per_task = student_statistics(scores, ReportConfig(estimators=(metric.split("/")[1],)))[metric].per_task()
    shares = entry["teacher_samples"]
    chosen = entry["metrics"][metric]
    return KLToCache(metric, chosen["value"], chosen["ci_low"], chosen["ci_high"], shares["n_records"],
                     shares["n_tasks"], shares["n_tokens"], shares["nonfinite_share"],
                     {t: float(v) if math.isfinite(v) else None for t, v in per_task.items()},
                     entry["metrics"])


def kl_to_cache(model_or_ref: PreTrainedModel | str | os.PathLike[str], cache: Path | str | TeacherCache, *,
                name: str = "model", tokenizer: PreTrainedTokenizerBase | None = None,
                max_records: int | None = None, max_ids: int = 0, device: str | None = None,
                dtype: str | None = None, work_dir: Path | None = None, bootstrap: int = ReportConfig.n_resamples,
                seed: int = 0, show_progress: bool = False) -> KLToCache:
    """KL(teacher || ``model_or_ref``) on ``cache`` (module docstring); see ``open_teacher_cache`` for
    ``max_records``/``max_ids`` and ``score_on_cache`` for the model and where it runs. The cache is
    checked before the model is touched."""
    target = open_teacher_cache(cache, max_records, max_ids)
    scores = score_on_cache(model_or_ref, target, name, tokenizer=tokenizer, device=device, dtype=dtype,
                            work_dir=work_dir, seed=seed, show_progress=show_progress)
    (entry,) = kl_report([scores], target, bootstrap, seed)["students"]
    return kl_of(scores, entry, target)
