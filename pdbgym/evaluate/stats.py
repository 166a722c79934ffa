"""Evaluation statistics, as pure functions of per-task outcomes.

Conventions: ``outcomes`` is a 2-D array-like ``[tasks, runs]`` of 0/1 solves (``final_test_passed``),
or a list of per-task lists when run counts differ. Runs of one task are not independent, so every
standard error here is clustered on the task (Miller 2024, "Adding Error Bars to Evals").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import integrate, stats

BOOTSTRAP_BELOW_TASKS = 200  # fewer tasks than this: task-level bootstrap CI; else the normal approximation


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
    ci_method: str  # "bootstrap" (task-level percentile) or "normal"
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


def estimate_mean(per_task: np.ndarray, confidence: float = 0.95, seed: int = 0) -> Estimate:
    """Mean over tasks with clustered SE; bootstrap CI below ``BOOTSTRAP_BELOW_TASKS`` tasks."""
    values = np.asarray(per_task, dtype=float)
    mean, se = float(values.mean()), clustered_se(values)
    if values.size < BOOTSTRAP_BELOW_TASKS:
        low, high = bootstrap_ci(values, confidence, seed=seed)
        method = "bootstrap"
    else:
        z = stats.norm.ppf(0.5 + confidence / 2)
        low, high, method = mean - z * se, mean + z * se, "normal"
    return Estimate(mean, se, low, high, int(values.size), method, confidence)


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

    def to_dict(self) -> dict:
        return {"mean_diff": self.mean_diff, "se": self.se, "ci": [self.ci_low, self.ci_high],
                "correlation": self.correlation, "n_tasks": self.n_tasks, "ci_method": self.ci_method,
                "min_detectable_diff": self.min_detectable_diff}


def paired_comparison(per_task_a: np.ndarray, per_task_b: np.ndarray, confidence: float = 0.95,
                      power: float = 0.8, seed: int = 0) -> PairedComparison:
    a, b = np.asarray(per_task_a, dtype=float), np.asarray(per_task_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired comparison needs the same tasks in both arms, got {a.size} and {b.size}")
    diff = a - b
    est = estimate_mean(diff, confidence, seed)
    corr = float(np.corrcoef(a, b)[0, 1]) if a.size > 1 and a.std() > 0 and b.std() > 0 else float("nan")
    mdd = minimum_detectable_difference(float(diff.std(ddof=1)) if diff.size > 1 else float("nan"),
                                        diff.size, alpha=1 - confidence, power=power)
    return PairedComparison(est.mean, est.se, est.ci_low, est.ci_high, corr, diff.size, est.ci_method, mdd)


def _z_sum(alpha: float, power: float) -> float:
    return float(stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power))


def minimum_detectable_difference(sd_diff: float, n_tasks: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true mean difference a paired two-sided test detects: (z_{1-a/2} + z_{1-b}) sd(d) / sqrt(T)."""
    return _z_sum(alpha, power) * sd_diff / math.sqrt(n_tasks)


def tasks_needed(delta: float, sd_diff: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Tasks needed to detect ``delta``: T = (z_{1-a/2} + z_{1-b})^2 Var(d) / delta^2, rounded up."""
    if delta <= 0:
        raise ValueError("the target difference must be positive")
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
    value, _ = integrate.quad(lambda x: x * k * stats.norm.pdf(x) * stats.norm.cdf(x) ** (k - 1), -12, 12)
    return float(value)


def winners_curse_inflation(n_candidates: int, sd_of_score: float) -> float:
    """Expected upward bias of the best of ``n_candidates`` equally good checkpoints' noisy scores."""
    return sd_of_score * expected_max_standard_normal(n_candidates)
