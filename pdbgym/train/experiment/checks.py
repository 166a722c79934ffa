"""The experiment report's on-policy learning checks: did GRPO raise the solve rate of the tasks it played?

Three checks read a GRPO run's logs; each compares the first part of the steps with the last:

- ``learning_check``: the pooled solve rate of the last quarter of steps against the first (``steps.jsonl``),
  steps as clusters, Newcombe's interval. A step draws its tasks afresh, so this one moves with the mix.
- ``task_paired_check``: each task against itself (``outcomes.jsonl``), the mean per-task difference with
  the sign-flip (randomization) interval over tasks (``stats.sign_flip_interval``), exact wherever a task's
  two parts could have come in either order. Takes the task mix out; assumes the steps of a part share
  nothing beyond the task, so a swing of the whole policy from one step to the next (every task up or
  down together) is read as learning.
- ``step_centred_check``: the same parts with steps as clusters and the mix taken out: each episode's
  outcome less its task's mean over both parts, averaged per step, the late steps against the early ones
  by Welch's interval (``stats.welch_interval``). A per-step swing shared by every task is inside its
  variance, at the price of few degrees of freedom.

Their false-positive rates at the shipped files' shapes are simulated by ``bench/learning_check_power.py``
(``docs/benchmarks.md``, "Learning checks at the short file's shape").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pdbgym.evaluate.stats import clustered_proportion, newcombe_from, paired_comparison, welch_interval


def step_counts(rows: list[dict[str, Any]], per_step: int) -> list[tuple[int, int]]:
    """Per logged step, its on-policy episodes: (solved, played), from the solve rate and the count."""
    counts = []
    for row in rows:
        played = max(0, per_step - int(row.get("episodes/replayed", 0)))
        rate = row.get("episodes/solve_rate")
        counts.append((round(float(rate) * played) if rate is not None and played > 0 else 0, played))
    return counts


def quarter_rate(counts: list[tuple[int, int]]) -> tuple[float, float, int]:
    """Pooled solve rate of some steps, its effective sample size (steps as clusters) and the episodes."""
    solved, played = zip(*counts, strict=True) if counts else ((), ())
    rate, n_eff = clustered_proportion(solved, played)
    return rate, n_eff, int(sum(played))


def learning_check(rows: list[dict[str, Any]], per_step: int) -> dict[str, Any] | None:
    """Solve rate of the last quarter of steps minus the first quarter's, with Newcombe's 95% CI.

    Each step is a cluster: its episodes are groups of G episodes of one task under one set of weights,
    so they are not independent draws; each quarter's Wilson interval takes the effective sample size
    of ``clustered_proportion`` (at most the episodes, at least the steps when the rates do not vary).
    """
    counts = step_counts(rows, per_step)
    quarter = max(1, len(counts) // 4)
    if len(counts) < 2:
        return None
    (first, n_first, e_first), (last, n_last, e_last) = quarter_rate(counts[:quarter]), quarter_rate(counts[-quarter:])
    if not e_first or not e_last:
        return None
    low, high = newcombe_from(last, n_last, first, n_first)
    return {"first": first, "last": last, "steps_per_quarter": quarter, "episodes": [e_first, e_last],
            "effective": [round(n_first, 1), round(n_last, 1)], "diff": last - first, "ci": [low, high],
            "learned": low > 0, "changed": low > 0 or high < 0}


def _parts(outcomes: list[dict[str, Any]], share: float) -> tuple[int, set[int], set[int]] | None:
    """The steps per part and the early and late parts' steps (the middle one of an odd count left out)."""
    steps = sorted({int(row["step"]) for row in outcomes})
    half = min(len(steps) // 2, int(len(steps) * share))
    if half < 1:
        return None
    return half, set(steps[:half]), set(steps[len(steps) - half:])


def _on_policy(outcomes: list[dict[str, Any]], early: set[int], late: set[int]) -> list[tuple[int, str, int, bool]]:
    """(step, task, solved, in the late part) of every on-policy episode of the two parts."""
    found = []
    for row in outcomes:
        step = int(row["step"])
        if step in early or step in late:
            found += [(step, episode["task"], int(bool(episode["solved"])), step in late)
                      for episode in row.get("episodes", []) if not episode.get("replayed")]
    return found


def task_paired_check(outcomes: list[dict[str, Any]], share: float = 0.5,
                      interval: str = "sign-flip") -> dict[str, Any] | None:
    """The later half of the GRPO steps against the earlier half, each task against itself.

    Each task played on-policy in both halves (``outcomes.jsonl``) gives its solve rate in each; the mean
    of the per-task differences gets the sign-flip 95% interval over tasks (``paired_comparison`` with
    ``interval="sign-flip"``: every pattern of the per-task differences' signs up to 16 tasks, the
    randomization test inverted, ``p_value`` its test's) and the difference it could detect at 80% power
    (normal approximation). With an odd number of steps the middle one is left out. ``share`` < 0.5
    compares the first and last ``share`` of the steps instead (a quarter pairs every task when each
    quarter holds whole epochs of the sampler). ``played`` counts the tasks played on-policy in each
    part, to tell whole epochs from partial ones. None when fewer than two tasks were played in both
    parts. ``changed``: the interval excludes 0 (two-sided; the same as ``p_value`` <= 0.05); ``learned``:
    it lies above 0. ``interval="t"`` (Student t, this check's before issue 42) and ``"bootstrap"`` (the
    percentile bootstrap before that, too narrow at 16 tasks) are kept for ``bench/learning_check_power.py``
    to show them on the same runs.
    """
    parts = _parts(outcomes, share)
    if parts is None:
        return None
    half, early, late = parts
    played: dict[str, tuple[list[int], list[int]]] = {}  # task -> (early outcomes, late outcomes)
    for _, task, solved, is_late in _on_policy(outcomes, early, late):
        played.setdefault(task, ([], []))[int(is_late)].append(solved)
    both = {task: halves for task, halves in played.items() if halves[0] and halves[1]}
    if len(both) < 2:
        return None
    before = np.array([sum(h[0]) / len(h[0]) for h in both.values()])
    after = np.array([sum(h[1]) / len(h[1]) for h in both.values()])
    paired = paired_comparison(after, before, interval=interval)
    return {"steps_per_half": half, "tasks": len(both), "first": float(before.mean()), "last": float(after.mean()),
            "played": [sum(1 for h in played.values() if h[0]), sum(1 for h in played.values() if h[1])],
            "episodes": [sum(len(h[0]) for h in both.values()), sum(len(h[1]) for h in both.values())],
            "diff": paired.mean_diff, "ci": [paired.ci_low, paired.ci_high], "method": paired.ci_method,
            "p_value": paired.p_value, "detectable": paired.min_detectable_diff, "learned": paired.ci_low > 0,
            "changed": paired.ci_low > 0 or paired.ci_high < 0}


def step_centred_check(outcomes: list[dict[str, Any]], share: float = 0.5) -> dict[str, Any] | None:
    """The late part of the steps against the early part with steps as clusters and the task mix taken out.

    Over the tasks played on-policy in both parts, each episode's outcome less its task's solve rate
    over both parts (the task's difficulty) is averaged per step; the late steps' values against the
    early steps' get Welch's 95% interval. A swing of the policy shared by every task at one step moves
    that step's value, so it lands in the variance instead of the difference. None with fewer than two
    steps a part or fewer than two paired tasks.
    """
    parts = _parts(outcomes, share)
    if parts is None or parts[0] < 2:
        return None
    half, early, late = parts
    episodes = _on_policy(outcomes, early, late)
    parts_of: dict[str, set[bool]] = {}
    for _, task, _, is_late in episodes:
        parts_of.setdefault(task, set()).add(is_late)
    paired = {task for task, seen in parts_of.items() if len(seen) == 2}
    if len(paired) < 2:
        return None
    kept = [e for e in episodes if e[1] in paired]
    task_rate = {task: np.mean([e[2] for e in kept if e[1] == task]) for task in paired}
    by_step: dict[int, list[float]] = {}
    for step, task, solved, _ in kept:
        by_step.setdefault(step, []).append(solved - task_rate[task])
    before = np.array([np.mean(v) for step, v in sorted(by_step.items()) if step in early])
    after = np.array([np.mean(v) for step, v in sorted(by_step.items()) if step in late])
    low, high, df = welch_interval(after, before)
    return {"steps_per_half": half, "tasks": len(paired), "steps": [int(before.size), int(after.size)],
            "diff": float(after.mean() - before.mean()), "ci": [low, high], "df": df,
            "learned": low > 0, "changed": low > 0 or high < 0}
