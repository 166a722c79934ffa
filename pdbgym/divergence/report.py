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
from typing import Any

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


@dataclass
class ReportConfig:
    """Estimators, bootstrap and extreme-ratio settings (defaults documented in docs/metrics.md)."""

    estimators: tuple[est.KlEstimator, ...] = est.KL_ESTIMATORS
    jsd_estimator: est.KlEstimator = "k3"
    extreme_threshold: float = 20.0
    n_resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0
    context: dict[str, Any] = field(default_factory=dict)


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


def _share_block(samples: SampleSet | None, threshold: float) -> dict[str, Any] | None:
    if samples is None:
        return None
    log_ratio = samples.log_ratios()
    return {
        "n_records": len(samples.task_ids),
        "n_tasks": len(set(samples.task_ids)),
        "n_tokens": int(log_ratio.size),
        "extreme_share": est.extreme_share(log_ratio, threshold),
        "nonfinite_share": est.nonfinite_share(log_ratio),
    }


def _student_entry(scores: StudentScores, stats: dict[str, Statistic], config: ReportConfig) -> dict[str, Any]:
    metrics = {}
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
        "student_samples": _share_block(scores.student_samples, config.extreme_threshold),
        "per_task": {HEADLINE: {t: _finite_or_none(v) for t, v in stats[HEADLINE].per_task().items()}},
    }


def build_report(students: Sequence[StudentScores], config: ReportConfig | None = None) -> dict[str, Any]:
    """The full comparison as a JSON-ready dict (non-finite numbers become null)."""
    config = config or ReportConfig()
    names = [s.name for s in students]
    if len(set(names)) != len(names):
        raise ValueError(f"student names must be unique, got {names}")
    stats = {s.name: student_statistics(s, config) for s in students}
    differences = []
    for a, b in combinations(names, 2):
        for metric in sorted(set(stats[a]) & set(stats[b])):
            diff = paired_difference(stats[a][metric], stats[b][metric], config.n_resamples, config.confidence,
                                     config.seed)
            entry = {"a": a, "b": b, "metric": metric}
            entry.update({k: (_finite_or_none(v) if isinstance(v, float) else v) for k, v in diff.to_dict().items()})
            differences.append(entry)
    return {
        "schema": SCHEMA,
        "context": config.context,
        "settings": {"extreme_threshold_nats": config.extreme_threshold, "bootstrap_resamples": config.n_resamples,
                     "confidence": config.confidence, "seed": config.seed, "jsd_estimator": config.jsd_estimator},
        "students": [_student_entry(s, stats[s.name], config) for s in students],
        "paired_differences": differences,
    }
