"""Token/sequence aggregations, task-level bootstrap and paired differences."""

from __future__ import annotations

import numpy as np
import pytest

from pdbgym.divergence import aggregate as agg

TERMS = [np.array([1.0, 3.0]), np.array([2.0]), np.array([4.0, 4.0, 4.0, np.inf]), np.array([])]
TASKS = ["a", "a", "b", "b"]


def test_three_aggregations_by_hand():
    assert agg.task_totals(TERMS, TASKS, "token_mean").value() == pytest.approx((1 + 3 + 2 + 12) / 6)
    assert agg.task_totals(TERMS, TASKS, "sequence_mean").value() == pytest.approx((2 + 2 + 4) / 3)
    assert agg.task_totals(TERMS, TASKS, "sequence_sum").value() == pytest.approx((4 + 2 + 12) / 3)
    per_task = agg.task_totals(TERMS, TASKS, "token_mean").per_task()
    assert per_task == {"a": pytest.approx(2.0), "b": pytest.approx(4.0)}


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="task ids"):
        agg.task_totals(TERMS, TASKS[:2], "token_mean")
    with pytest.raises(ValueError, match="unknown aggregation"):
        agg.task_totals(TERMS, TASKS, "median")  # type: ignore[arg-type]
    a = agg.task_totals(TERMS[:2], ["a", "a"], "token_mean")
    b = agg.task_totals(TERMS[2:], ["b", "b"], "token_mean")
    with pytest.raises(ValueError, match="share no task"):
        agg.paired_difference(a, b)


def test_bootstrap_ci_brackets_the_value_and_shrinks_with_more_tasks():
    rng = np.random.default_rng(0)

    def width(n_tasks):
        terms = [rng.normal(1.0, 1.0, size=50) for _ in range(n_tasks)]
        totals = agg.task_totals(terms, [f"t{i}" for i in range(n_tasks)], "token_mean")
        low, high = agg.bootstrap_ci(totals, n_resamples=1000, seed=1)
        assert low <= totals.value() <= high
        return high - low

    assert width(200) < 0.5 * width(20)


def test_paired_difference_cancels_shared_task_noise():
    rng = np.random.default_rng(3)
    task_effect = rng.normal(0, 5, size=40)
    tasks = [f"t{i}" for i in range(40)]
    a_terms = [effect + rng.normal(0, 0.1, size=30) for effect in task_effect]
    b_terms = [terms - 0.25 for terms in a_terms]
    a = agg.task_totals(a_terms, tasks, "token_mean")
    b = agg.task_totals(b_terms, tasks, "token_mean")
    diff = agg.paired_difference(a, b, n_resamples=500)
    assert diff.value == pytest.approx(0.25)
    assert diff.ci_high - diff.ci_low < 1e-9  # a constant shift has no paired variance
    assert diff.per_task_correlation > 0.99
    unpaired_low, unpaired_high = agg.bootstrap_ci(a, n_resamples=500)
    assert unpaired_high - unpaired_low > 1.0
