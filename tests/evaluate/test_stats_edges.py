"""Statistics at the edges: 0/n, n/n, tasks that do not vary, and pilots with no spread."""

import json
import math

import numpy as np
import pytest

from pdbgym.errors import PdbgymError
from pdbgym.evaluate import stats
from pdbgym.evaluate.analysis import summarize
from pdbgym.evaluate.planning import plan
from pdbgym.evaluate.report import report_page
from pdbgym.evaluate.results import EpisodeRow, ResultsStore
from pdbgym.termination import TERMINATION_MEANINGS

Z = 1.959963984540054


def test_zero_of_n_gives_the_wilson_upper_bound_not_a_point():
    est = stats.estimate_mean(np.zeros(20))
    assert est.ci_low == 0.0
    assert est.ci_high == pytest.approx(Z**2 / (20 + Z**2))  # Wilson at p=0, n = 20 tasks
    assert est.ci_method == "wilson"


def test_n_of_n_gives_the_wilson_lower_bound_not_a_point():
    est = stats.estimate_mean(np.ones(20))
    assert est.ci_high == 1.0
    assert est.ci_low == pytest.approx(20 / (20 + Z**2))


def test_all_equal_task_means_keep_a_width_of_one_trial_per_task():
    est = stats.estimate_mean(np.full(16, 0.5))
    low, high = stats.wilson_interval(0.5, 16)
    assert (est.ci_low, est.ci_high) == pytest.approx((low, high))
    assert high - low > 0.4


def test_wilson_bound_restores_coverage_near_zero_where_the_bootstrap_alone_fails():
    # 20 tasks, one run each, true solve rate 3%: most samples are 0/20, whose bootstrap CI is [0, 0].
    rng = np.random.default_rng(7)
    covered_boot = covered = 0
    reps = 300
    for rep in range(reps):
        sample = (rng.random(20) < 0.03).astype(float)
        low, high = stats.bootstrap_ci(sample, n_resamples=500, seed=rep)
        covered_boot += low <= 0.03 <= high
        est = stats.estimate_mean(sample, seed=rep)
        covered += est.ci_low <= 0.03 <= est.ci_high
    assert covered_boot / reps < 0.8
    assert covered / reps >= 0.93


def test_effective_tasks_is_korn_graubard_and_capped_by_episodes():
    values = np.array([0.0, 0.25, 0.5, 0.25])
    p, var = values.mean(), values.var(ddof=1) / 4
    assert stats.effective_tasks(values) == pytest.approx(p * (1 - p) / var)
    assert stats.effective_tasks(values, max_n=16) == 16
    assert stats.effective_tasks(np.zeros(7)) == 7


@pytest.mark.parametrize("a_value, b_value", [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0)])
def test_degenerate_paired_comparison_warns_and_falls_back(a_value, b_value):
    a, b = np.full(21, a_value), np.full(21, b_value)
    cmp = stats.paired_comparison(a, b)
    assert cmp.warning and "sd 0" in cmp.warning
    assert cmp.se == pytest.approx(math.sqrt(stats.FALLBACK_VAR_DIFF / 21))
    assert cmp.min_detectable_diff == pytest.approx(2.801585 * math.sqrt(0.5 / 21), rel=1e-5)
    assert cmp.ci_high - cmp.ci_low > 0.2
    assert cmp.ci_low <= a_value - b_value <= cmp.ci_high
    assert cmp.ci_method == "newcombe" and -1 <= cmp.ci_low and cmp.ci_high <= 1


def test_power_formulas_refuse_a_zero_sd():
    with pytest.raises(ValueError, match="FALLBACK_VAR_DIFF"):
        stats.tasks_needed(0.1, 0.0)
    with pytest.raises(ValueError, match="must be positive"):
        stats.minimum_detectable_difference(float("nan"), 20)


def _pilot(tmp_path, solved_a: bool, solved_b: bool, tasks: int = 6):
    store = ResultsStore(tmp_path)
    ids = [f"t{i}" for i in range(tasks)]
    store.open({"tasks": "x", "arms": {"a": "scripted", "b": "embedded"}, "task_ids": ids, "runs": 2})
    store.append([EpisodeRow(arm, t, run, ok, "solved" if ok else "other", 1, 0.1, "x.json")
                  for arm, ok in (("a", solved_a), ("b", solved_b)) for t in ids for run in range(2)])
    return tmp_path


def test_plan_from_a_pilot_with_no_spread_warns_and_never_says_zero_tasks(tmp_path):
    result = plan(0.1, pilot=_pilot(tmp_path, False, False))
    assert result["warnings"] and "sd 0" in result["warnings"][0]
    assert result["sd_of_per_task_difference"] == pytest.approx(math.sqrt(0.5))
    assert result["tasks_needed"] == math.ceil(2.801585**2 * 0.5 / 0.01)
    assert min(result["min_detectable_difference_at"].values()) > 0
    json.dumps(result)


def test_plan_refuses_a_given_zero_sd():
    with pytest.raises(PdbgymError, match="--sd-diff must be positive"):
        plan(0.1, sd_diff=0.0)


def test_report_of_an_oracle_against_a_failing_model_explains_itself(tmp_path):
    _pilot(tmp_path, True, False)
    store = ResultsStore(tmp_path)
    config, rows = store.config(), store.rows()
    summary = summarize(rows, config["arms"], config["task_ids"], 2)
    oracle, model = summary["arm_results"]["a"]["pass@1"], summary["arm_results"]["b"]["pass@1"]
    assert oracle["ci"][0] < 1.0 and model["ci"][1] > 0.0
    assert summary["warnings"] and summary["comparisons"][0]["min_detectable_diff"] > 0
    figures = {name: tmp_path / f"{name}.png" for name in ("pass_at_k", "heatmap", "outcomes")}
    text = report_page(summary, rows, "edge", figures).to_markdown()
    assert "oracle: replays the task's reference fix" in text
    assert "Wilson score interval" in text and "Newcombe" in text
    assert all(meaning in text for meaning in TERMINATION_MEANINGS.values())
    assert "**Warning:** a - b:" in text


def test_plan_from_an_unfinished_pilot_uses_its_finished_tasks_and_refuses_one_with_none(tmp_path):
    pilot = _pilot(tmp_path / "some", True, False)
    store = ResultsStore(pilot)
    rows = [row for row in store.rows() if not (row.arm == "b" and row.instance_id in ("t4", "t5"))]
    (pilot / "episodes.jsonl").unlink()
    store.append(rows)  # t4 and t5 unfinished by arm b
    assert plan(0.1, pilot=pilot)["sd_source"].startswith(f"pilot campaign {pilot} (4 tasks)")
    empty = tmp_path / "none"
    ResultsStore(empty).open({"tasks": "x", "arms": {"a": "scripted", "b": "embedded"}, "task_ids": ["t0"], "runs": 2})
    with pytest.raises(PdbgymError, match="no task that arms a and b both finished"):
        plan(0.1, pilot=empty)
