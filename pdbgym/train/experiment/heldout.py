"""Where the experiment's held-out campaigns live, one per sampling temperature, and each arm's entropy.

The model arms play the test split at ``[eval] temperature`` (the primary: ``OUT/eval``,
``OUT/eval-summary.json``) and again at each of ``[eval] temperatures`` (``OUT/eval-T0.7``,
``OUT/eval-summary-T0.7.json``; 0 is greedy, played once a task since every run would be the same).
The extra campaigns play the trained arms only: the base and the oracle are controls whose figure does
not bear on what training changed, and the oracle is scripted (no sampler), so both play the primary
campaign alone (with three seeds and four runs a task they would be about a third of the held-out episodes).
A gain that shows at one temperature only is a claim about that sampler, not about the model: the seed
recipe evaluated at T = 0.7, GRPO trains the T = 1 sampler, and greedy decoding is what a user would run.

Entropy: the mean surprisal -log p of the tokens an arm sampled (its records' ``rollout_log_probs`` on
model tokens), a Monte Carlo estimate of the sampler's per-token entropy in nats, with a Student-t 95%
interval over tasks. A policy that lost entropy solves more often by being surer, which a higher
temperature can undo; one that kept it learned something else.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from pdbgym.evaluate.stats import t_interval
from pdbgym.rollouts.cache import read_cache

ENTROPY_FILE = "entropy.json"  # in each campaign folder: arm -> sampled_entropy
TASK_SETS_FILE = "sets.json"  # OUT/tasks/sets.json: instance id -> its task set ([tasks] family or suite)


def task_sets(out: Path) -> dict[str, str]:
    """Each task's set as the tasks stage recorded it (``{}`` for a folder from before it did)."""
    path = out / "tasks" / TASK_SETS_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def label(temperature: float) -> str:
    """``T0.7``, ``T1``, ``greedy``: a temperature as a folder suffix and a column name."""
    return "greedy" if temperature == 0 else f"T{temperature:g}"


def extra_temperatures(primary: float, temperatures: list[float]) -> list[float]:
    """``[eval] temperatures`` less the primary one, in the file's order, each once."""
    return [t for t in dict.fromkeys(temperatures) if t != primary]


CONTROL_ARMS = ("base", "oracle")  # played in the primary campaign only


def arms_at(arms: dict[str, str], temperature: float, primary: float) -> dict[str, str]:
    """The arms a campaign at ``temperature`` plays: all at the primary temperature, else the trained ones."""
    return arms if temperature == primary else {k: v for k, v in arms.items() if k not in CONTROL_ARMS}


def campaign_paths(out: Path, temperature: float, primary: float) -> tuple[Path, Path]:
    """(campaign folder, summary file) of the held-out campaign at ``temperature``."""
    if temperature == primary:
        return out / "eval", out / "eval-summary.json"
    return out / f"eval-{label(temperature)}", out / f"eval-summary-{label(temperature)}.json"


def sampled_entropy(cache_dir: Path) -> dict[str, Any] | None:
    """Mean surprisal of an arm's sampled model tokens (nats/token) with a t interval over tasks, from its
    campaign records (``OUT/eval/cache/ARM``); None when it holds no log-probs (scripted arms, no records)."""
    if not cache_dir.is_dir():
        return None
    per_task: dict[str, list[float]] = {}
    for record in read_cache(cache_dir):
        surprisal = [-lp for lp, mask in zip(record.rollout_log_probs, record.loss_mask, strict=False)
                     if mask and math.isfinite(lp)]
        if surprisal:
            per_task.setdefault(record.instance_id, []).extend(surprisal)
    if not per_task:
        return None
    means = np.array([float(np.mean(v)) for v in per_task.values()])
    low, high = t_interval(means)
    return {"nats_per_token": float(means.mean()), "ci": [low, high], "tasks": len(per_task),
            "tokens": sum(len(v) for v in per_task.values())}
