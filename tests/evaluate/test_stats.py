"""Statistics against hand computations."""

import math

import numpy as np
import pytest

from pdbgym.evaluate import stats


def test_pass_at_k_hand_values():
    assert stats.pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert stats.pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert stats.pass_at_k(8, 1, 3) == pytest.approx(1 - math.comb(7, 3) / math.comb(8, 3))
    assert stats.pass_at_k(3, 0, 1) == 0.0
    assert stats.pass_at_k(4, 3, 2) == 1.0  # n - c < k


def test_pass_at_k_refuses_k_above_runs():
    with pytest.raises(ValueError, match="at least 3 runs"):
        stats.pass_at_k(2, 1, 3)
    with pytest.raises(ValueError, match="2 task"):
        stats.per_task_pass_at_k([[1, 0], [1], [0]], 2)


def test_pass_at_1_is_the_mean_solve_rate():
    outcomes = [[1, 0, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]]
    assert stats.per_task_pass_at_k(outcomes, 1) == pytest.approx([0.75, 0.25, 1.0])
    assert stats.max_k(outcomes) == 4


def test_clustered_se_is_sd_of_task_means_over_root_t():
    assert stats.clustered_se(np.array([1.0, 0.0, 1.0, 0.0])) == pytest.approx(math.sqrt(1 / 3) / 2)


def test_estimate_uses_bootstrap_below_200_tasks_and_normal_above():
    small = stats.estimate_mean(np.array([0.0, 1.0] * 20))
    assert small.ci_method == "bootstrap" and small.ci_low < 0.5 < small.ci_high
    big = stats.estimate_mean(np.array([0.0, 1.0] * 150))
    assert big.ci_method == "normal"
    assert big.ci_high - big.mean == pytest.approx(1.959964 * big.se, rel=1e-5)


def test_paired_comparison_hand_values():
    a = np.array([1.0, 0.5, 0.75, 0.25])
    b = np.array([0.5, 0.5, 0.25, 0.25])
    cmp = stats.paired_comparison(a, b)
    d = a - b
    assert cmp.mean_diff == pytest.approx(d.mean())
    assert cmp.se == pytest.approx(d.std(ddof=1) / 2)
    assert cmp.correlation == pytest.approx(np.corrcoef(a, b)[0, 1])
    assert cmp.min_detectable_diff == pytest.approx(2.801585 * d.std(ddof=1) / 2, rel=1e-5)


def test_power_planning_round_trip():
    needed = stats.tasks_needed(0.10, 0.30)
    assert needed == math.ceil(2.801585**2 * 0.09 / 0.01)
    assert stats.minimum_detectable_difference(0.30, needed) <= 0.10
    assert stats.minimum_detectable_difference(0.30, needed - 1) > 0.10


def test_winners_curse_matches_order_statistics():
    assert stats.expected_max_standard_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-6)
    assert stats.expected_max_standard_normal(5) == pytest.approx(1.1630, abs=1e-3)
    assert stats.expected_max_standard_normal(10) == pytest.approx(1.5388, abs=1e-3)
    assert stats.winners_curse_inflation(1, 3.0) == 0.0


def test_winners_curse_by_simulation():
    rng = np.random.default_rng(1)
    draws = rng.standard_normal((200_000, 9)).max(axis=1).mean()
    assert draws == pytest.approx(stats.expected_max_standard_normal(9), abs=0.01)


def test_clustered_proportion_counts_correlated_episodes_as_fewer_trials():
    # clusters that vary no more than binomial draws would: worth about as many trials as episodes
    rng = np.random.default_rng(0)
    solved = rng.binomial(16, 0.3, size=200)
    p, n_eff = stats.clustered_proportion(solved, [16] * 200)
    assert p == pytest.approx(solved.sum() / 3200)
    assert 0.7 * 3200 < n_eff <= 3200
    # all-or-nothing clusters (every episode of a step alike): p(1-p)/v = 7 trials, times (1.96 / 2.365)^2 for
    # the 7 degrees of freedom of an 8-cluster variance, raised to the floor of one trial a cluster
    p, n_eff = stats.clustered_proportion([16, 0, 0, 16, 0, 16, 0, 0], [16] * 8)
    assert p == pytest.approx(3 / 8) and n_eff == 8.0
    # lumpy but not all-or-nothing: the t adjustment shows (p(1-p)/v = 33.6, x 0.687)
    p, n_eff = stats.clustered_proportion([12, 2, 4, 10, 3, 11, 2, 4], [16] * 8)
    assert n_eff == pytest.approx(0.375 * 0.625 / (sum((y - 6) ** 2 for y in [12, 2, 4, 10, 3, 11, 2, 4]) / (8 * 7 * 256))
                                  * (1.959964 / 2.364624) ** 2, rel=1e-4)
    # clusters that vary less than chance, and all-0 or all-1 outcomes: every episode counts (Korn-Graubard)
    assert stats.clustered_proportion([8, 8], [16, 16]) == (0.5, 32.0)
    assert stats.clustered_proportion([0, 0, 0], [8, 8, 8]) == (0.0, 24.0)
    # one cluster: no variance to estimate, one trial; nothing played: nothing
    assert stats.clustered_proportion([5], [8]) == (5 / 8, 1.0)
    assert stats.clustered_proportion([1, 2], [0, 0]) == (0.0, 0.0)
    # a Newcombe interval on the effective sizes is wider than one counting every episode
    naive = stats.newcombe_from(0.6, 160, 0.3, 160)
    clustered = stats.newcombe_from(0.6, 10, 0.3, 10)
    assert clustered[0] < naive[0] < 0.3 < naive[1] < clustered[1]


def test_the_t_interval_and_welchs_interval_are_the_textbook_ones():
    from scipy import stats as scipy_stats

    from pdbgym.evaluate.stats import t_interval, welch_interval

    d = np.array([0.25, -0.5, 0.0, 0.75, 0.25, 0.5, -0.25, 0.0, 0.5, 0.25, 0.0, 0.25, -0.25, 0.5, 0.75, 0.0])
    want = scipy_stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert t_interval(d) == pytest.approx((want.low, want.high))
    a, b = np.array([0.1, 0.3, -0.2, 0.4, 0.0]), np.array([-0.1, 0.0, -0.3])
    test = scipy_stats.ttest_ind(a, b, equal_var=False)
    low, high, df = welch_interval(a, b)
    assert (low, high) == pytest.approx(tuple(test.confidence_interval(0.95))) and df == pytest.approx(test.df)
    assert t_interval(d[:1]) == (float("-inf"), float("inf"))  # one cluster: no spread to estimate
    assert welch_interval(a, b[:1])[:2] == (float("-inf"), float("inf"))
    assert welch_interval(np.zeros(3), np.zeros(3))[2] == 0.0  # no spread on either side


def test_a_paired_comparison_by_t_is_wider_than_the_percentile_bootstrap_at_sixteen_tasks():
    """At 16 tasks the percentile bootstrap's interval is too narrow (its false positives on simulated null
    GRPO runs: 7-8% two-sided); the t interval's is t_15 / z * sqrt(16 / 15) = 1.13 times as wide."""
    rng = np.random.default_rng(3)
    after, before = rng.random(16), rng.random(16)
    boot, t = stats.paired_comparison(after, before), stats.paired_comparison(after, before, interval="t")
    assert t.ci_method == "t" and t.mean_diff == pytest.approx(boot.mean_diff)
    assert (t.ci_high - t.ci_low) > 1.08 * (boot.ci_high - boot.ci_low)
    with pytest.raises(ValueError, match="interval"):
        stats.paired_comparison(after, before, interval="bca")


def test_the_two_way_interval_is_the_crossed_random_effects_one():
    """Mean squares by hand on a 3 x 2 matrix; one seed falls back on the t interval over tasks."""
    d = np.array([[0.5, 0.75], [0.0, 0.5], [0.25, 0.75]])
    grand, rows, cols = d.mean(), d.mean(axis=1), d.mean(axis=0)
    ms_t = 2 * ((rows - grand) ** 2).sum() / 2
    ms_s = 3 * ((cols - grand) ** 2).sum() / 1
    ms_e = ((d - rows[:, None] - cols[None, :] + grand) ** 2).sum() / 2
    var = (ms_t + ms_s - ms_e) / 6
    df = (ms_t + ms_s - ms_e) ** 2 / (ms_t**2 / 2 + ms_s**2 / 1 + ms_e**2 / 2)
    from scipy import stats as scipy_stats

    half = scipy_stats.t.ppf(0.975, df) * math.sqrt(var)
    mean, low, high, got_df, method = stats.two_way_interval(d)
    assert method.startswith("two-way") and got_df == pytest.approx(df)
    assert (mean, low, high) == pytest.approx((grand, grand - half, grand + half))
    one_seed = stats.two_way_interval(d[:, :1])
    assert one_seed[1:3] == pytest.approx(stats.t_interval(d[:, 0])) and one_seed[4] == "t over tasks"
    # seeds that agree exactly leave the tasks' one-way variance as the floor
    flat = np.array([[0.5, 0.5], [0.0, 0.0], [0.25, 0.25]])
    assert stats.two_way_interval(flat)[1:4] == pytest.approx((*stats.t_interval(flat.mean(axis=1)), 2.0))
    # seeds apart by less than their residual noise: the seed variance estimate is negative, the floor holds
    noisy = np.array([[0.5, 0.25], [0.0, 0.25], [0.25, 0.75]])
    assert stats.two_way_interval(noisy)[4] == "t over tasks (floor)"
    with pytest.raises(ValueError, match="tasks, seeds"):
        stats.two_way_interval(np.zeros(3))


def test_the_sign_flip_interval_is_the_exact_randomization_test_inverted():
    """Up to 16 clusters every pattern of signs: the p-value at a shift is the share of patterns whose sum is
    as far from 0 as the observed one, ties included, and the interval holds exactly the shifts it keeps."""
    import itertools

    rng = np.random.default_rng(4)
    for size in (6, 7, 9):
        signs = np.array(list(itertools.product([1, -1], repeat=size)))
        for _ in range(6):
            d = rng.integers(-3, 4, size) / 4  # lumpy, with ties and zeros, as a few episodes a task give

            def p(shift: float, d: np.ndarray = d, signs: np.ndarray = signs) -> float:
                return float(np.mean(np.abs(signs @ (d - shift)) >= abs((d - shift).sum()) - 1e-9))

            low, high, p0 = stats.sign_flip_interval(d)
            assert p0 == pytest.approx(p(0.0))
            assert (low > 0 or high < 0) == (p0 <= 0.05)  # interval and test never disagree
            assert low <= d.mean() <= high
            assert min(p(low), p(high)) > 0.05 and max(p(low - 1e-6), p(high + 1e-6)) <= 0.05
    # all sixteen alike in sign: 2 patterns of 65,536 as extreme
    assert stats.sign_flip_interval(np.full(16, 0.25) + np.arange(16) / 100)[2] == pytest.approx(2 / 2**16)
    # five clusters have 32 patterns, two of them trivial: no 95% interval to give; one cluster none at all
    assert stats.sign_flip_interval(np.array([0.1, 0.2, 0.3, 0.4, 0.5]))[:2] == (float("-inf"), float("inf"))
    assert stats.sign_flip_interval(np.array([0.5])) == (float("-inf"), float("inf"), 1.0)


def test_the_sign_flip_interval_draws_patterns_past_sixteen_clusters_and_is_seeded():
    from scipy import stats as scipy_stats

    d = np.random.default_rng(5).normal(0.2, 0.5, 40)
    drawn = stats.sign_flip_interval(d)
    assert drawn == stats.sign_flip_interval(d)  # the same patterns every call
    assert drawn != stats.sign_flip_interval(d, seed=1)
    t = scipy_stats.ttest_1samp(d, 0.0)
    low, high = t.confidence_interval(0.95)
    assert drawn[0] == pytest.approx(low, abs=0.03) and drawn[1] == pytest.approx(high, abs=0.03)
    assert drawn[2] == pytest.approx(t.pvalue, abs=0.01)  # about normal values: about the t test


def test_a_paired_comparison_by_sign_flips_gives_its_p_value_and_stays_within_rates():
    after, before = np.array([1.0, 0.75, 1.0, 0.5, 1.0, 0.75]), np.array([0.0, 0.25, 0.5, 0.0, 0.25, 0.5])
    cmp = stats.paired_comparison(after, before, interval="sign-flip")
    assert cmp.ci_method == "sign-flip" and cmp.p_value == pytest.approx(2 / 64)  # all six rose
    assert 0 < cmp.ci_low < cmp.mean_diff < cmp.ci_high <= 1 and cmp.to_dict()["p_value"] == cmp.p_value
    five = stats.paired_comparison(after[:5], before[:5], interval="sign-flip")
    assert (five.ci_low, five.ci_high) == (-1.0, 1.0)  # no 95% interval from 5 tasks: the whole range of rates
    assert "p_value" not in stats.paired_comparison(after, before, interval="t").to_dict()
