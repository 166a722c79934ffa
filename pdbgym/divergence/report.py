"""Divergence reports: per-student metrics with task-level CIs, paired differences, JSON, table, plot.

Metric names say what they are (docs/metrics.md has the formulas):

* ``kl_teacher_student/<k1|k2|k3>/<aggregation>``: KL(teacher || student) from TEACHER samples (the cache).
* ``kl_student_teacher/<k1|k2|k3>/<aggregation>``: KL(student || teacher) from STUDENT samples.
* ``jsd/token_mean`` and ``jsd/sequence``: JSD, each half from its own model's samples.

Compatibility names for dashboards built on the source evaluation: ``kl_fwd_mean`` =
kl_teacher_student/k3/token_mean (the source labelled it KL(student || teacher), wrongly),
``kl_back_mean`` = kl_student_teacher/k3/token_mean, ``jsd_mean`` = jsd/token_mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import NotRequired, TypedDict

import numpy as np

from pdbgym.divergence import estimators as est
from pdbgym.divergence.aggregate import (
    AGGREGATIONS,
    Statistic,
    WeightedSum,
    bootstrap_ci,
    paired_difference,
    task_totals,
)
from pdbgym.rollouts.record import SemanticsDict

SCHEMA = "pdbgym.divergence/1"
HEADLINE = "kl_teacher_student/k3/token_mean"


@dataclass
class SampleSet:
    """Sequences sampled by one model, each scored by both models (aligned per-record arrays, nats)."""

    task_ids: list[str]
    teacher_logprobs: list[np.ndarray]
    student_logprobs: list[np.ndarray]

    def log_ratios(self) -> np.ndarray:
        """lS - lT over every scored token, flattened."""
        if not self.task_ids:
            return np.zeros(0)
        return np.concatenate([s - t for s, t in zip(self.student_logprobs, self.teacher_logprobs, strict=True)])


@dataclass
class StudentScores:
    """Everything scored for one student: the cache's teacher samples, optionally its own samples."""

    name: str
    teacher_samples: SampleSet
    student_samples: SampleSet | None = None


class ReportContext(TypedDict):
    """What a report records about its inputs: the cache, its records, the transform they were scored under,
    and (from ``compare``) the teacher and the students as given."""

    cache: str
    n_records: int
    semantics: SemanticsDict
    teacher: NotRequired[str | None]
    students: NotRequired[list[str]]


class MetricValue(TypedDict):
    """One metric of a student: its value and bootstrap interval (None where not finite)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None


class ShareBlock(TypedDict):
    """The samples one direction was scored on: records, tasks, tokens, and the shares of extreme and
    non-finite log-ratios among the tokens."""

    n_records: int
    n_tasks: int
    n_tokens: int
    extreme_share: float
    nonfinite_share: float


class Compat(TypedDict):
    """The headline figures under the names the earlier report format used."""

    kl_fwd_mean: float | None
    kl_back_mean: float | None
    jsd_mean: float | None


class StudentEntry(TypedDict):
    """One student of the report: every metric by its documented name, the samples it was scored on and the
    headline metric per task."""

    name: str
    metrics: dict[str, MetricValue]
    compat: Compat
    teacher_samples: ShareBlock
    student_samples: ShareBlock | None  # None: the student's own samples were not scored
    per_task: dict[str, dict[str, float | None]]


class DifferenceEntry(TypedDict):
    """Student ``a`` minus student ``b`` on one metric over their shared tasks (``PairedDifference``)."""

    a: str
    b: str
    metric: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n_tasks: int
    per_task_correlation: float | None


class ReportSettings(TypedDict):
    extreme_threshold_nats: float
    bootstrap_resamples: int
    confidence: float
    seed: int
    jsd_estimator: str


class DivergenceReport(TypedDict):
    """``build_report``: the JSON a divergence comparison writes (docs/metrics.md)."""

    schema: str
    context: ReportContext | dict[str, str]
    settings: ReportSettings
    students: list[StudentEntry]
    paired_differences: list[DifferenceEntry]


@dataclass
class ReportConfig:
    """Estimators, bootstrap and extreme-ratio settings (defaults documented in docs/metrics.md)."""

    estimators: tuple[est.KlEstimator, ...] = est.KL_ESTIMATORS
    jsd_estimator: est.KlEstimator = "k3"
    extreme_threshold: float = 20.0
    n_resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0
    context: ReportContext | dict[str, str] = field(default_factory=dict)  # {}: none given


def _kl_statistics(samples: SampleSet, direction: str, config: ReportConfig) -> dict[str, Statistic]:
    stats: dict[str, Statistic] = {}
    for estimator in config.estimators:
        if direction == "kl_teacher_student":
            terms = [est.kl_teacher_student_terms(t, s, estimator)
                     for t, s in zip(samples.teacher_logprobs, samples.student_logprobs, strict=True)]
        else:
            terms = [est.kl_student_teacher_terms(s, t, estimator)
                     for t, s in zip(samples.teacher_logprobs, samples.student_logprobs, strict=True)]
        for aggregation in AGGREGATIONS:
            stats[f"{direction}/{estimator}/{aggregation}"] = task_totals(terms, samples.task_ids, aggregation)
    return stats


def _jsd_statistics(scores: StudentScores, config: ReportConfig) -> dict[str, Statistic]:
    teacher, student = scores.teacher_samples, scores.student_samples
    assert student is not None
    halves = {
        "token_mean": (
            [est.jsd_half_terms(t, s, config.jsd_estimator)
             for t, s in zip(teacher.teacher_logprobs, teacher.student_logprobs, strict=True)],
            [est.jsd_half_terms(s, t, config.jsd_estimator)
             for t, s in zip(student.teacher_logprobs, student.student_logprobs, strict=True)],
        ),
        "sequence": (
            [est.jsd_sequence_terms(np.array([t.sum()]), np.array([s.sum()]))
             for t, s in zip(teacher.teacher_logprobs, teacher.student_logprobs, strict=True)],
            [est.jsd_sequence_terms(np.array([s.sum()]), np.array([t.sum()]))
             for t, s in zip(student.teacher_logprobs, student.student_logprobs, strict=True)],
        ),
    }
    return {
        f"jsd/{name}": WeightedSum((
            (0.5, task_totals(teacher_terms, teacher.task_ids, "token_mean")),
            (0.5, task_totals(student_terms, student.task_ids, "token_mean")),
        ))
        for name, (teacher_terms, student_terms) in halves.items()
    }


def student_statistics(scores: StudentScores, config: ReportConfig) -> dict[str, Statistic]:
    """Every metric of one student as a bootstrappable statistic, keyed by its documented name."""
    stats = _kl_statistics(scores.teacher_samples, "kl_teacher_student", config)
    if scores.student_samples is not None:
        stats.update(_kl_statistics(scores.student_samples, "kl_student_teacher", config))
        stats.update(_jsd_statistics(scores, config))
    return stats


def _finite_or_none(value: float) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _share_block(samples: SampleSet, threshold: float) -> ShareBlock:
    log_ratio = samples.log_ratios()
    return {
        "n_records": len(samples.task_ids),
        "n_tasks": len(set(samples.task_ids)),
        "n_tokens": int(log_ratio.size),
        "extreme_share": est.extreme_share(log_ratio, threshold),
        "nonfinite_share": est.nonfinite_share(log_ratio),
    }


def _student_entry(scores: StudentScores, stats: dict[str, Statistic], config: ReportConfig) -> StudentEntry:
    metrics: dict[str, MetricValue] = {}
    for name, stat in stats.items():
        low, high = bootstrap_ci(stat, config.n_resamples, config.confidence, config.seed)
        metrics[name] = {"value": _finite_or_none(stat.value()), "ci_low": _finite_or_none(low),
                         "ci_high": _finite_or_none(high)}

    def headline(key: str) -> float | None:
        return metrics[key]["value"] if key in metrics else None

    return {
        "name": scores.name,
        "metrics": metrics,
        "compat": {
            "kl_fwd_mean": headline("kl_teacher_student/k3/token_mean"),
            "kl_back_mean": headline("kl_student_teacher/k3/token_mean"),
            "jsd_mean": headline("jsd/token_mean"),
        },
        "teacher_samples": _share_block(scores.teacher_samples, config.extreme_threshold),
        "student_samples": (None if scores.student_samples is None
                            else _share_block(scores.student_samples, config.extreme_threshold)),
        "per_task": {HEADLINE: {t: _finite_or_none(v) for t, v in stats[HEADLINE].per_task().items()}},
    }


def build_report(students: Sequence[StudentScores], config: ReportConfig | None = None) -> DivergenceReport:
    """The full comparison as a JSON-ready dict (non-finite numbers become null)."""
    config = config or ReportConfig()
    names = [s.name for s in students]
    if len(set(names)) != len(names):
        raise ValueError(f"student names must be unique, got {names}")
    stats = {s.name: student_statistics(s, config) for s in students}
    differences: list[DifferenceEntry] = []
    for a, b in combinations(names, 2):
        for metric in sorted(set(stats[a]) & set(stats[b])):
            diff = paired_difference(stats[a][metric], stats[b][metric], config.n_resamples, config.confidence,
                                     config.seed)
            differences.append({"a": a, "b": b, "metric": metric, "value": _finite_or_none(diff.value),
                                "ci_low": _finite_or_none(diff.ci_low), "ci_high": _finite_or_none(diff.ci_high),
                                "n_tasks": diff.n_tasks,
                                "per_task_correlation": _finite_or_none(diff.per_task_correlation)})
    return {
        "schema": SCHEMA,
        "context": config.context,
        "settings": {"extreme_threshold_nats": config.extreme_threshold, "bootstrap_resamples": config.n_resamples,
                     "confidence": config.confidence, "seed": config.seed, "jsd_estimator": config.jsd_estimator},
        "students": [_student_entry(s, stats[s.name], config) for s in students],
        "paired_differences": differences,
    }
