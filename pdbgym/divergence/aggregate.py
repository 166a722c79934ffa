"""Aggregating per-token estimator terms over records and tasks, with task-level bootstrap CIs.

Pure numpy. Every aggregation is a ratio of per-task totals, so a task-level bootstrap (resample
tasks with replacement, recompute the ratio) treats the runs of one task as the correlated cluster
they are:

* ``token_mean``: sum of all token terms / number of tokens (pooled over records).
* ``sequence_mean``: mean over records of each record's token-mean.
* ``sequence_sum``: mean over records of each record's token sum (the per-sequence KL, chain rule).

Non-finite terms are excluded from every sum and count; callers report their share beside the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Aggregation = Literal["token_mean", "sequence_mean", "sequence_sum"]
AGGREGATIONS: tuple[Aggregation, ...] = ("token_mean", "sequence_mean", "sequence_sum")


@dataclass(frozen=True)
class TaskTotals:
    """Per-task numerator and denominator of one aggregation; the statistic is sum(num) / sum(den)."""

    task_ids: tuple[str, ...]
    numerator: np.ndarray  # [n_tasks]
    denominator: np.ndarray  # [n_tasks]

    def value(self) -> float:
        total = float(self.denominator.sum())
        return float(self.numerator.sum()) / total if total > 0 else float("nan")

    def per_task(self) -> dict[str, float]:
        with np.errstate(invalid="ignore", divide="ignore"):
            values = self.numerator / self.denominator
        return {task: float(v) for task, v in zip(self.task_ids, values, strict=True)}

    def restricted(self, task_ids: Sequence[str]) -> TaskTotals:
        return restrict(self, task_ids)

    def resampled_values(self, task_indices: np.ndarray) -> np.ndarray:
        """The statistic for each row of ``task_indices`` ([n_resamples, n_tasks] ints)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.numerator[task_indices].sum(axis=1) / self.denominator[task_indices].sum(axis=1)


@dataclass(frozen=True)
class WeightedSum:
    """sum_i weight_i * statistic_i over the tasks all parts share (e.g. JSD = 1/2 half_T + 1/2 half_S)."""

    parts: tuple[tuple[float, TaskTotals], ...]

    @property
    def task_ids(self) -> tuple[str, ...]:
        shared = set(self.parts[0][1].task_ids)
        for _, totals in self.parts[1:]:
            shared &= set(totals.task_ids)
        return tuple(sorted(shared))

    def restricted(self, task_ids: Sequence[str]) -> WeightedSum:
        return WeightedSum(tuple((w, restrict(t, task_ids)) for w, t in self.parts))

    def value(self) -> float:
        return sum(w * t.value() for w, t in self.restricted(self.task_ids).parts)

    def per_task(self) -> dict[str, float]:
        tasks = self.task_ids
        per_part = [(w, t.per_task()) for w, t in self.parts]
        return {task: sum(w * values[task] for w, values in per_part) for task in tasks}

    def resampled_values(self, task_indices: np.ndarray) -> np.ndarray:
        """Rows of ``task_indices`` index into ``self.task_ids`` (the shared tasks)."""
        return sum(w * t.resampled_values(task_indices) for w, t in self.restricted(self.task_ids).parts)


Statistic = TaskTotals | WeightedSum


def task_totals(
    per_record_terms: Sequence[np.ndarray], record_task_ids: Sequence[str], aggregation: Aggregation
) -> TaskTotals:
    """Group per-record term arrays by task into the totals of ``aggregation``.

    ``per_record_terms[i]`` holds record i's per-token terms; ``record_task_ids[i]`` its task. Records
    with no finite term add nothing (they have no token-mean).
    """
    if len(per_record_terms) != len(record_task_ids):
        raise ValueError(f"{len(per_record_terms)} term arrays but {len(record_task_ids)} task ids")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; use one of {AGGREGATIONS}")
    order = sorted(set(record_task_ids))
    index = {task: i for i, task in enumerate(order)}
    numerator = np.zeros(len(order))
    denominator = np.zeros(len(order))
    for terms, task in zip(per_record_terms, record_task_ids, strict=True):
        finite = np.asarray(terms, dtype=np.float64)
        finite = finite[np.isfinite(finite)]
        if finite.size == 0:
            continue
        slot = index[task]
        if aggregation == "token_mean":
            numerator[slot] += finite.sum()
            denominator[slot] += finite.size
        elif aggregation == "sequence_mean":
            numerator[slot] += finite.mean()
            denominator[slot] += 1
        else:
            numerator[slot] += finite.sum()
            denominator[slot] += 1
    return TaskTotals(tuple(order), numerator, denominator)


def bootstrap_indices(n_tasks: int, n_resamples: int, seed: int) -> np.ndarray:
    """[n_resamples, n_tasks] task indices drawn with replacement."""
    return np.random.default_rng(seed).integers(0, n_tasks, size=(n_resamples, n_tasks))


def percentile_interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    finite = samples[np.isfinite(samples)]
    if finite.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return float(low), float(high)


def bootstrap_ci(
    totals: Statistic, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the statistic under resampling tasks with replacement."""
    indices = bootstrap_indices(len(totals.task_ids), n_resamples, seed)
    return percentile_interval(totals.resampled_values(indices), confidence)


@dataclass(frozen=True)
class PairedDifference:
    """Statistic(a) - statistic(b) over the tasks both share, with a paired task-level bootstrap CI."""

    value: float
    ci_low: float
    ci_high: float
    n_tasks: int
    per_task_correlation: float  # Pearson r of the per-task values of a and b

    def to_dict(self) -> dict[str, float | int]:
        return dict(vars(self))


def restrict(totals: TaskTotals, task_ids: Sequence[str]) -> TaskTotals:
    index = {task: i for i, task in enumerate(totals.task_ids)}
    rows = np.array([index[task] for task in task_ids], dtype=np.int64)
    return TaskTotals(tuple(task_ids), totals.numerator[rows], totals.denominator[rows])


def paired_difference(
    a: Statistic, b: Statistic, n_resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> PairedDifference:
    """Difference a - b on shared tasks; both resampled with the SAME task indices (paired)."""
    shared = sorted(set(a.task_ids) & set(b.task_ids))
    if not shared:
        raise ValueError("the two sets of totals share no task; a paired difference needs common tasks")
    a_shared, b_shared = a.restricted(shared), b.restricted(shared)
    indices = bootstrap_indices(len(shared), n_resamples, seed)
    diffs = a_shared.resampled_values(indices) - b_shared.resampled_values(indices)
    low, high = percentile_interval(diffs, confidence)
    per_a = np.array(list(a_shared.per_task().values()))
    per_b = np.array(list(b_shared.per_task().values()))
    both = np.isfinite(per_a) & np.isfinite(per_b)
    corr = float("nan")
    if both.sum() > 2 and per_a[both].std() > 0 and per_b[both].std() > 0:
        corr = float(np.corrcoef(per_a[both], per_b[both])[0, 1])
    return PairedDifference(a_shared.value() - b_shared.value(), low, high, len(shared), corr)
