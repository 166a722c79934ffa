"""Sizing a campaign before running it: how many tasks a target difference needs."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TypedDict

import numpy as np

from pdbgym.episode_defaults import check_setting
from pdbgym.errors import PdbgymError
from pdbgym.evaluate import stats
from pdbgym.evaluate.analysis import outcome_matrix
from pdbgym.evaluate.results import ResultsStore


def pilot_sd_diff(campaign_dir: Path) -> tuple[float, int]:
    """sd of per-task pass@1 differences between the first two arms of a campaign, on the tasks both finished."""
    store = ResultsStore(campaign_dir)
    config, rows = store.config(), store.rows()
    arms = list(config["arms"])
    if len(arms) < 2:
        raise PdbgymError(f"{campaign_dir} has one arm; a pilot for planning needs two to estimate sd(d)")
    runs = config["runs"]
    finished = {(r.arm, r.instance_id, r.run) for r in rows}
    # Only tasks both arms finished every run of (an unfinished pilot counts what it has).
    tasks = [t for t in config["task_ids"]
             if all((arm, t, run) in finished for arm in arms[:2] for run in range(runs))]
    if not tasks:
        raise PdbgymError(
            f"{campaign_dir} has no task that arms {arms[0]} and {arms[1]} both finished (every one of {runs} runs) "
            f"of its {len(config['task_ids'])}; a pilot needs finished tasks to estimate sd(d): finish it by "
            "rerunning its `pdbgym eval` command, or give --sd-diff")
    a = stats.per_task_pass_at_k(outcome_matrix(rows, arms[0], tasks), 1)
    b = stats.per_task_pass_at_k(outcome_matrix(rows, arms[1], tasks), 1)
    sd = float(np.std(a - b, ddof=1)) if len(tasks) > 1 else 0.0
    return sd, len(tasks)


class Plan(TypedDict):
    """``plan``: the difference to detect, the sd of per-task differences assumed and where it came from, the
    test's alpha and power, the tasks needed, warnings, and the detectable difference at common task counts."""

    target_difference: float
    sd_of_per_task_difference: float
    sd_source: str
    alpha: float
    power: float
    tasks_needed: int
    warnings: list[str]
    min_detectable_difference_at: dict[str, float]


def plan(delta: float, *, runs: int = 8, base_rate: float = 0.5, sd_diff: float | None = None,
         pilot: Path | None = None, alpha: float = 0.05, power: float = 0.8) -> Plan:
    """Tasks needed to detect ``delta`` with a paired comparison, and the MDE at common task counts.

    A pilot whose per-task differences do not vary (sd 0, e.g. both arms 0% everywhere) would say that
    any difference is detectable with one task; the plan then warns (``warnings``) and uses the
    conservative sd of ``stats.FALLBACK_VAR_DIFF`` instead.
    """
    if not 0 < delta < 1:
        raise PdbgymError(f"--delta is a difference in solve rate, between 0 and 1; got {delta}")
    check_setting("runs", runs)
    warnings: list[str] = []
    if pilot is not None:
        sd, n_pilot = pilot_sd_diff(pilot)
        source = f"pilot campaign {pilot} ({n_pilot} tasks)"
        if not sd > 0:  # 0 (every task differs alike, e.g. 0% vs 0%) or NaN (one task)
            warnings.append(stats.degenerate_sd_warning(f"pilot {pilot}"))
            sd = math.sqrt(stats.FALLBACK_VAR_DIFF)
            source += f"; its sd was 0, replaced by the conservative {sd:.3f}"
    elif sd_diff is not None:
        if not sd_diff > 0:
            raise PdbgymError(f"--sd-diff must be positive, got {sd_diff}; if unsure use the conservative "
                              f"{math.sqrt(stats.FALLBACK_VAR_DIFF):.3f} (two independent Bernoulli(0.5) arms)")
        sd, source = sd_diff, "given"
    else:
        p_b = base_rate
        p_a = min(1.0, base_rate + delta)
        sd = stats.sd_diff_model(p_a, p_b, runs)
        source = (f"planning model: base rate {p_b}, {runs} runs, between-task sd 0.3, arm correlation 0.5 "
                  "(give --sd-diff or --pilot for a better figure)")
    needed = stats.tasks_needed(delta, sd, alpha, power)
    return {
        "target_difference": delta,
        "sd_of_per_task_difference": sd,
        "sd_source": source,
        "alpha": alpha,
        "power": power,
        "tasks_needed": needed,
        "warnings": warnings,
        "min_detectable_difference_at": {
            str(t): stats.minimum_detectable_difference(sd, t, alpha, power) for t in (20, 40, 100, 200, 500)
        },
    }
