"""Evaluation statistics, as pure functions of per-task outcomes.

Conventions: ``outcomes`` is a 2-D array-like ``[tasks, runs]`` of 0/1 solves (``final_test_passed``),
or a list of per-task lists when run counts differ. Runs of one task are not independent, so every
standard error here is clustered on the task (Miller 2024, "Adding Error Bars to Evals").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

BOOTSTRAP_BELOW_TASKS = 200  # fewer tasks than this: task-level bootstrap CI; else the normal approximation
SIGN_FLIPS_EXACT_UPTO = 16  # up to this many clusters: every sign pattern (2^16 = 65,536); more: as many drawn


def _norm() -> Any:
    """The standard normal of scipy, imported on first use (every CLI start imports this module)."""
    from scipy import stats  # heavy: scipy takes about a second to import

    return stats.norm


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k) for n runs of which c passed."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= passed <= runs, got passed={c}, runs={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs at least {k} runs per task, got {n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def per_task_pass_at_k(outcomes: Sequence[Sequence[int]], k: int) -> np.ndarray:
    """pass@k of each task; every task must have at least k runs (else pass@k is not defined for it)."""
    short = [i for i, runs in enumerate(outcomes) if len(runs) < k]
    if short:
        raise ValueError(f"pass@{k} needs >= {k} runs for every task; {len(short)} task(s) have fewer")
    return np.array([pass_at_k(len(runs), int(sum(runs)), k) for runs in outcomes])


def max_k(outcomes: Sequence[Sequence[int]]) -> int:
    """The largest k for which pass@k is reportable: the fewest runs any task has."""
    return min(len(runs) for runs in outcomes) if len(outcomes) else 0


@dataclass(frozen=True)
class Estimate:
    """A mean over tasks with its clustered standard error and a confidence interval."""

    mean: float
    se: float
    ci_low: float
    ci_high: float
    n_tasks: int
    ci_method: str  # "bootstrap" (task-level percentile), "normal", "wilson" or "<base>+wilson" (estimate_mean)
    confidence: float = 0.95

    def to_dict(self) -> dict:
        return {"mean": self.mean, "se": self.se, "ci": [self.ci_low, self.ci_high],
                "n_tasks": self.n_tasks, "ci_method": self.ci_method, "confidence": self.confidence}


def clustered_se(per_task: np.ndarray) -> float:
    """SE of the mean over tasks: sd(per-task values) / sqrt(T), sd with ddof=1."""
    values = np.asarray(per_task, dtype=float)
    if values.size < 2:
        return float("nan")
    return float(values.std(ddof=1) / math.sqrt(values.size))


def bootstrap_ci(per_task: np.ndarray, confidence: float = 0.95, n_resamples: int = 10_000,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile CI of the mean, resampling tasks with replacement."""
    values = np.asarray(per_task, dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.size, size=(n_resamples, values.size))
    means = values[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def t_interval(per_cluster: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Student-t interval of a mean over C clusters: mean +- t_{C-1} sd / sqrt(C), sd with ddof=1.

    The percentile bootstrap of the same mean has spread sd sqrt((C-1)/C) / sqrt(C) and normal quantiles,
    both too narrow at C = 10 to 30 tasks: on simulated null GRPO runs of 16 tasks its two-sided 95%
    interval excluded 0 in 7-8% of runs, this one in 5% (``bench/learning_check_power.py``). Fewer than two
    clusters give no spread to estimate: (-inf, inf).
    """
    values = np.asarray(per_cluster, dtype=float)
    if values.size < 2:
        return float("-inf"), float("inf")
    from scipy import stats as scipy_stats  # heavy: scipy takes about a second to import

    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, values.size - 1)) * clustered_se(values)
    return float(values.mean()) - half, float(values.mean()) + half


def _flipped_sums(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each of the 2^C patterns of flipped values (bit i: value i flipped): their sum and number."""
    sums, sizes = np.zeros(1), np.zeros(1)
    for value in values:
        sums, sizes = np.concatenate([sums, sums + value]), np.concatenate([sizes, sizes + 1])
    return sums, sizes


def sign_flip_interval(per_cluster: np.ndarray, confidence: float = 0.95, draws: int = 65_535,
                       seed: int = 0) -> tuple[float, float, float]:
    """The sign-flip (randomization) interval of a mean over C clusters, and its test's p-value at 0.

    Where nothing changed, each cluster's value is symmetric about 0 (a task's two halves of episodes could
    have come in either order), so every pattern e of signs gives sum e_c x_c as likely a value as the
    observed sum. The test of a shift d is exact under that symmetry alone: p(d) is the share of patterns
    with |sum e_c (x_c - d)| >= |sum (x_c - d)|, ties counted as extreme, so it never rejects more often
    than the nominal rate however lumpy the values (0/1 outcomes of a few episodes a task) or unequal their
    spreads. A pattern flipping the clusters S (neither none nor all) meets that exactly for d between the
    mean of x over S and over the rest, and every such span holds mean(x); the interval {d: p(d) > alpha}
    is [L, U] with L the m-th lowest span start and U the m-th highest span end over the N patterns
    (both trivial ones spanning everything), m = floor(alpha N) + 1. So 0 lies outside it exactly where
    p(0) <= alpha: interval and test never disagree.

    Up to ``SIGN_FLIPS_EXACT_UPTO`` clusters every one of the 2^C patterns (exact and deterministic);
    more: the observed pattern and ``draws`` drawn with ``seed`` (a Monte Carlo randomization test, still
    exact). Returns (L, U, p(0)); fewer than two clusters, or too few patterns to reach ``confidence``
    (C < 6 at 95%), give an infinite bound.
    """
    values = np.asarray(per_cluster, dtype=float)
    count = values.size
    if count < 2:
        return float("-inf"), float("inf"), 1.0
    if count <= SIGN_FLIPS_EXACT_UPTO:
        sums, sizes = _flipped_sums(values)
    else:  # a drawn pattern: uniform ones of each run of 16 clusters; the first pattern is the observed signs
        rng, sums, sizes = np.random.default_rng(seed), np.zeros(draws + 1), np.zeros(draws + 1)
        for start in range(0, count, SIGN_FLIPS_EXACT_UPTO):
            part_sums, part_sizes = _flipped_sums(values[start:start + SIGN_FLIPS_EXACT_UPTO])
            pick = rng.integers(0, part_sums.size, draws)
            sums[1:] += part_sums[pick]
            sizes[1:] += part_sizes[pick]
    inner = (sizes > 0) & (sizes < count)
    with np.errstate(divide="ignore", invalid="ignore"):
        flipped, kept = sums / sizes, (values.sum() - sums) / (count - sizes)
    # rounded so that a span ending at 0 in exact arithmetic ends at 0, not at 1e-17: ties stay ties
    starts = np.where(inner, np.round(np.minimum(flipped, kept), 12), float("-inf"))
    ends = np.where(inner, np.round(np.maximum(flipped, kept), 12), float("inf"))
    m = math.floor(round((1 - confidence) * starts.size, 9)) + 1
    low, high = float(np.partition(starts, m - 1)[m - 1]), float(-np.partition(-ends, m - 1)[m - 1])
    return low, high, float(np.mean((starts <= 0) & (ends >= 0)))


def welch_interval(a: np.ndarray, b: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """Welch's interval of mean(a) - mean(b) for two independent samples of cluster values: the lower
    bound, the upper bound and the Welch-Satterthwaite degrees of freedom
    df = (va + vb)^2 / (va^2 / (na - 1) + vb^2 / (nb - 1)), va = var(a) / na (ddof=1).

    Each side needs at least two values; with no spread on either side the interval is (-inf, inf): two
    or three clusters a side that happen to agree say nothing about how much clusters vary.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.size < 2 or b.size < 2:
        return float("-inf"), float("inf"), 0.0
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    if va + vb <= 0:
        return float("-inf"), float("inf"), 0.0
    df = float((va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1)))
    from scipy import stats as scipy_stats  # heavy: scipy takes about a second to import

    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(va + vb)
    diff = float(a.mean() - b.mean())
    return diff - half, diff + half, df


def two_way_interval(diffs: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float, float, str]:
    """Mean of a [tasks, seeds] matrix of per-task differences with tasks and seeds as crossed random effects.

    d_ts = mu + a_t + b_s + e_ts (a task's own difficulty for the pair of arms, a training seed's effect
    shared by every task, the rest). With T tasks and S seeds, r_t and c_s the row and column means and g
    the grand mean: MS_T = S sum (r_t - g)^2 / (T - 1), MS_S = T sum (c_s - g)^2 / (S - 1), MS_E = sum
    (d_ts - r_t - c_s + g)^2 / ((T - 1)(S - 1)), and Var(g) = (MS_T + MS_S - MS_E) / (T S), never below the
    larger of MS_T / (T S) (tasks as the only clusters) and MS_S / (T S) (seeds as the only replicates).
    Student t with Satterthwaite's degrees of freedom. Returns (mean, low, high, df, method); one seed: the
    t interval over tasks; one task: over seeds.
    """
    d = np.asarray(diffs, dtype=float)
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"two_way_interval needs a [tasks, seeds] matrix, got shape {d.shape}")
    tasks, seeds = d.shape
    grand = float(d.mean())
    if seeds < 2 or tasks < 2:
        low, high = t_interval(d.mean(axis=1) if seeds < 2 else d.mean(axis=0), confidence)
        n = max(tasks, seeds)
        return grand, low, high, float(n - 1), "t over tasks" if seeds < 2 else "t over seeds"
    rows, cols = d.mean(axis=1), d.mean(axis=0)
    ms_t = seeds * float(((rows - grand) ** 2).sum()) / (tasks - 1)
    ms_s = tasks * float(((cols - grand) ** 2).sum()) / (seeds - 1)
    ms_e = float(((d - rows[:, None] - cols[None, :] + grand) ** 2).sum()) / ((tasks - 1) * (seeds - 1))
    combined = ms_t + ms_s - ms_e
    parts = [(ms_t, tasks - 1), (ms_s, seeds - 1), (-ms_e, (tasks - 1) * (seeds - 1))]
    method = "two-way (tasks x seeds), Satterthwaite"
    if combined < max(ms_t, ms_s):  # a negative component estimate: keep the larger one-way variance
        combined, parts = max((ms_t, [(ms_t, tasks - 1)]), (ms_s, [(ms_s, seeds - 1)]), key=lambda x: x[0])
        method = "t over tasks (floor)" if parts[0][1] == tasks - 1 and combined == ms_t else "t over seeds (floor)"
    if combined <= 0:
        return grand, float("-inf"), float("inf"), 0.0, method
    df = combined**2 / sum(value**2 / dof for value, dof in parts)
    from scipy import stats as scipy_stats  # heavy: scipy takes about a second to import

    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(combined / (tasks * seeds))
    return grand, grand - half, grand + half, float(df), method


def wilson_interval(p_hat: float, n_eff: float, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``p_hat`` observed on ``n_eff`` (effective) trials.

    With z = z_{(1+confidence)/2}: centre (p + z^2/2n) / (1 + z^2/n), half-width
    z / (1 + z^2/n) * sqrt(p(1-p)/n + z^2/4n^2). Never zero-width for finite n, and it keeps its coverage
    at p = 0 and p = 1, where the normal and percentile-bootstrap intervals collapse to a point.
    """
    if n_eff <= 0:
        return 0.0, 1.0
    z = float(_norm().ppf(0.5 + confidence / 2))
    denom = 1 + z * z / n_eff
    centre = (p_hat + z * z / (2 * n_eff)) / denom
    half = z / denom * math.sqrt(p_hat * (1 - p_hat) / n_eff + z * z / (4 * n_eff * n_eff))
    return max(0.0, centre - half), min(1.0, centre + half)


def effective_tasks(per_task: np.ndarray, max_n: int | None = None) -> float:
    """Effective number of independent trials behind a mean of [0,1] per-task values (Korn-Graubard).

    n_eff = p(1-p) / v, with v = s^2 / T the task-clustered variance of the mean (s: sd of per-task
    values, ddof=1), capped at ``max_n`` (the episodes behind the mean) when given. Where v is 0 (all
    tasks equal, in particular 0/n and n/n) the data say nothing about how runs of one task correlate,
    so the conservative n_eff = T is used: each task counts as one trial.
    """
    values = np.asarray(per_task, dtype=float)
    t, p = values.size, float(values.mean())
    var = values.var(ddof=1) / t if t > 1 else 0.0
    if var <= 0 or p <= 0 or p >= 1:
        return float(t)
    n_eff = p * (1 - p) / var
    return min(n_eff, float(max_n)) if max_n else n_eff


def estimate_mean(per_task: np.ndarray, confidence: float = 0.95, seed: int = 0,
                  max_n: int | None = None) -> Estimate:
    """Mean over tasks with clustered SE and a CI that stays honest at 0% and 100%.

    Base interval: the task-level percentile bootstrap below ``BOOTSTRAP_BELOW_TASKS`` tasks, else the
    normal interval mean +- z SE. Both collapse to a point when every task has the same value (0/n, n/n),
    and the bootstrap undercovers near the boundary. So for per-task values in [0, 1] (solve rates,
    pass@k) the CI is the hull of the base interval and the Wilson score interval (``wilson_interval``)
    at p = mean with the Korn-Graubard effective sample size of ``effective_tasks`` (T tasks when the
    values do not vary). ``ci_method`` names what set the bounds: "bootstrap"/"normal" when the Wilson
    interval lies inside the base one, "wilson" when it contains it, "<base>+wilson" otherwise.
    ``max_n`` caps the effective sample size (the episodes behind the mean).
    """
    values = np.asarray(per_task, dtype=float)
    mean, se = float(values.mean()), clustered_se(values)
    if values.size < BOOTSTRAP_BELOW_TASKS:
        low, high = bootstrap_ci(values, confidence, seed=seed)
        method = "bootstrap"
    else:
        z = _norm().ppf(0.5 + confidence / 2)
        low, high, method = mean - z * se, mean + z * se, "normal"
    if values.size and values.min() >= 0 and values.max() <= 1:
        w_low, w_high = wilson_interval(mean, effective_tasks(values, max_n), confidence)
        if w_low < low or w_high > high:
            method = "wilson" if (w_low <= low and w_high >= high) else f"{method}+wilson"
            low, high = min(low, w_low), max(high, w_high)
    return Estimate(mean, se, float(low), float(high), int(values.size), method, confidence)


# Variance of one task's difference used when a sample gives none (sd 0): the difference of two
# independent Bernoulli(0.5) outcomes, 0.25 + 0.25 = 0.5, the largest a single-run solve-rate difference
# of uncorrelated arms can have.
FALLBACK_VAR_DIFF = 0.5


def degenerate_sd_warning(what: str) -> str:
    return (f"{what}: every task has the same difference (sd 0), which says nothing about the spread; "
            f"using the conservative sd {math.sqrt(FALLBACK_VAR_DIFF):.3f} (variance {FALLBACK_VAR_DIFF}: two "
            "independent Bernoulli(0.5) arms) instead")


@dataclass(frozen=True)
class PairedComparison:
    """Arm A minus arm B over the same tasks: d_t = a_t - b_t."""

    mean_diff: float
    se: float
    ci_low: float
    ci_high: float
    correlation: float  # Pearson correlation of per-task a_t and b_t (pairing helps when > 0)
    n_tasks: int
    ci_method: str
    min_detectable_diff: float  # at the given alpha and power, for this many tasks
    warning: str = ""  # set when sd(d) was 0 and the conservative fallback was used
    p_value: float | None = None  # "sign-flip": the randomization test's two-sided p-value of no difference

    def to_dict(self) -> dict:
        found = {"mean_diff": self.mean_diff, "se": self.se, "ci": [self.ci_low, self.ci_high],
                 "correlation": self.correlation, "n_tasks": self.n_tasks, "ci_method": self.ci_method,
                 "min_detectable_diff": self.min_detectable_diff, "warning": self.warning}
        return found if self.p_value is None else {**found, "p_value": self.p_value}


def newcombe_interval(a: np.ndarray, b: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Newcombe's hybrid score interval of mean(a) - mean(b), from each arm's Wilson interval.

    L = d - sqrt((p_a - l_a)^2 + (u_b - p_b)^2), U = d + sqrt((u_a - p_a)^2 + (p_b - l_b)^2), with each
    arm's (l, u) from ``wilson_interval`` at n = T. The pairing term is left out, which widens the
    interval when arms correlate positively (conservative).
    """
    return newcombe_from(float(a.mean()), a.size, float(b.mean()), b.size, confidence)


def newcombe_from(pa: float, na: float, pb: float, nb: float, confidence: float = 0.95) -> tuple[float, float]:
    """``newcombe_interval`` of p_a - p_b from each proportion and its (effective) sample size."""
    la, ua = wilson_interval(pa, na, confidence)
    lb, ub = wilson_interval(pb, nb, confidence)
    d = pa - pb
    return d - math.hypot(pa - la, ub - pb), d + math.hypot(ua - pa, pb - lb)


def clustered_proportion(solved: Sequence[float], played: Sequence[float],
                         confidence: float = 0.95) -> tuple[float, float]:
    """The pooled proportion of clustered 0/1 outcomes and its effective sample size (Korn-Graubard).

    Cluster i solved y_i of m_i; n = sum m over the C clusters that played any. p = sum y / n, and the
    variance of p is the ratio estimator's, v = sum (y_i - p m_i)^2 / (C (C - 1) mbar^2). Then
    n_eff = p(1-p) / v, times (z / t_{C-1})^2 for the few degrees of freedom a C-cluster variance has
    (z, t at ``confidence``), at most n and at least C (episodes of a cluster all alike: one trial a
    cluster is the least a cluster can be worth). Where p is 0 or 1, or v is 0, the clusters vary no more than
    independent draws would, and n_eff = n (Korn and Graubard's rule). One cluster gives no variance to
    estimate at all: n_eff = 1. Use n_eff in ``wilson_interval`` / ``newcombe_from``: episodes of one
    cluster (a GRPO step, a task) are not independent draws, and counting them as such makes an
    interval too narrow.
    """
    y, m = np.asarray(solved, dtype=float), np.asarray(played, dtype=float)
    keep = m > 0
    y, m = y[keep], m[keep]
    clusters, n = int(m.size), float(m.sum())
    if clusters == 0:
        return 0.0, 0.0
    p = float(y.sum() / n)
    if clusters < 2:
        return p, 1.0
    var = float(((y - p * m) ** 2).sum() / (clusters * (clusters - 1) * m.mean() ** 2))
    if p <= 0 or p >= 1 or var <= 0:
        return p, n
    from scipy import stats as scipy_stats  # heavy: scipy takes about a second to import

    z = float(scipy_stats.norm.ppf(0.5 + confidence / 2))
    t = float(scipy_stats.t.ppf(0.5 + confidence / 2, clusters - 1))
    return p, min(max(p * (1 - p) / var * (z / t) ** 2, float(clusters)), n)


def paired_comparison(per_task_a: np.ndarray, per_task_b: np.ndarray, confidence: float = 0.95,
                      power: float = 0.8, seed: int = 0, interval: str = "bootstrap") -> PairedComparison:
    """A - B with a task-clustered SE, CI and minimum detectable difference.

    ``interval``: "bootstrap" (``estimate_mean``'s: the task-level percentile bootstrap below
    ``BOOTSTRAP_BELOW_TASKS`` tasks), "t" (``t_interval``: mean +- t_{T-1} SE, which keeps its coverage
    at a few tens of tasks where the percentile bootstrap is too narrow) or "sign-flip"
    (``sign_flip_interval``: exact wherever each task's difference is symmetric about 0 under no change,
    never above the nominal rate; ``p_value`` its test's; for values in [0, 1] clipped to [-1, 1]).

    When every task has the same difference (0 vs 0, 100 vs 0, one task), sd(d) = 0 would give SE 0, a
    point CI and a detectable difference of 0. Instead the comparison warns, uses the conservative
    ``FALLBACK_VAR_DIFF`` for the SE and the detectable difference, and Newcombe's interval (for values
    in [0, 1]) for the CI (``ci_method`` "newcombe").
    """
    a, b = np.asarray(per_task_a, dtype=float), np.asarray(per_task_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired comparison needs the same tasks in both arms, got {a.size} and {b.size}")
    diff = a - b
    corr = float(np.corrcoef(a, b)[0, 1]) if a.size > 1 and a.std() > 0 and b.std() > 0 else float("nan")
    sd = float(diff.std(ddof=1)) if diff.size > 1 else 0.0
    if interval not in ("bootstrap", "t", "sign-flip"):
        raise ValueError(f"interval {interval!r}: use 'bootstrap', 't' or 'sign-flip'")
    if sd > 0:
        mdd = minimum_detectable_difference(sd, diff.size, alpha=1 - confidence, power=power)
        if interval == "sign-flip":
            low, high, p = sign_flip_interval(diff, confidence, seed=seed)
            if min(a.min(), b.min()) >= 0 and max(a.max(), b.max()) <= 1:  # a difference of rates: in [-1, 1]
                low, high = max(low, -1.0), min(high, 1.0)
            return PairedComparison(float(diff.mean()), clustered_se(diff), low, high, corr, diff.size,
                                    "sign-flip", mdd, p_value=p)
        if interval == "t":
            low, high = t_interval(diff, confidence)
            return PairedComparison(float(diff.mean()), clustered_se(diff), low, high, corr, diff.size, "t", mdd)
        est = estimate_mean(diff, confidence, seed)
        return PairedComparison(est.mean, est.se, est.ci_low, est.ci_high, corr, diff.size, est.ci_method, mdd)
    sd = math.sqrt(FALLBACK_VAR_DIFF)
    se = sd / math.sqrt(diff.size)
    if min(a.min(), b.min()) >= 0 and max(a.max(), b.max()) <= 1:
        low, high, method = *newcombe_interval(a, b, confidence), "newcombe"
    else:
        z = float(_norm().ppf(0.5 + confidence / 2))
        low, high, method = float(diff.mean()) - z * se, float(diff.mean()) + z * se, "normal (fallback sd)"
    mdd = minimum_detectable_difference(sd, diff.size, alpha=1 - confidence, power=power)
    return PairedComparison(float(diff.mean()), se, low, high, corr, diff.size, method, mdd,
                            degenerate_sd_warning("paired comparison"))


def _check_sd(sd_diff: float) -> None:
    if not sd_diff > 0:  # also catches NaN
        raise ValueError(f"sd of per-task differences must be positive, got {sd_diff}; with no spread in the "
                         f"data use the conservative sqrt(FALLBACK_VAR_DIFF) = {math.sqrt(FALLBACK_VAR_DIFF):.3f}")


def _z_sum(alpha: float, power: float) -> float:
    return float(_norm().ppf(1 - alpha / 2) + _norm().ppf(power))


def minimum_detectable_difference(sd_diff: float, n_tasks: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true mean difference a paired two-sided test detects: (z_{1-a/2} + z_{1-b}) sd(d) / sqrt(T).

    An sd of 0 (or NaN) is refused: it would claim any difference is detectable; use
    ``FALLBACK_VAR_DIFF`` when a sample gives no spread.
    """
    _check_sd(sd_diff)
    return _z_sum(alpha, power) * sd_diff / math.sqrt(n_tasks)


def tasks_needed(delta: float, sd_diff: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Tasks needed to detect ``delta``: T = (z_{1-a/2} + z_{1-b})^2 Var(d) / delta^2, rounded up."""
    if delta <= 0:
        raise ValueError("the target difference must be positive")
    _check_sd(sd_diff)
    return math.ceil(_z_sum(alpha, power) ** 2 * sd_diff**2 / delta**2)


def sd_diff_model(p_a: float, p_b: float, runs: int, between_task_sd: float = 0.3, correlation: float = 0.5) -> float:
    """A planning model of sd(d_t) when no pilot data exist.

    Per-task true rates vary with sd ``between_task_sd`` and correlate ``correlation`` across arms; each
    arm's task mean adds binomial noise p(1-p)/runs. Var(d) = 2 s^2 (1 - rho) + p_a(1-p_a)/n + p_b(1-p_b)/n.
    """
    var = 2 * between_task_sd**2 * (1 - correlation) + p_a * (1 - p_a) / runs + p_b * (1 - p_b) / runs
    return math.sqrt(var)


def expected_max_standard_normal(k: int) -> float:
    """E[max of k iid N(0,1)] = integral of x k phi(x) Phi(x)^(k-1) dx (0 for k=1)."""
    if k < 1:
        raise ValueError("need at least one candidate")
    if k == 1:
        return 0.0
    from scipy import integrate  # heavy: scipy takes about a second to import

    value, _ = integrate.quad(lambda x: x * k * _norm().pdf(x) * _norm().cdf(x) ** (k - 1), -12, 12)
    return float(value)


def winners_curse_inflation(n_candidates: int, sd_of_score: float) -> float:
    """Expected upward bias of the best of ``n_candidates`` equally good checkpoints' noisy scores."""
    return sd_of_score * expected_max_standard_normal(n_candidates)
