"""From a campaign's episode rows to the numbers a report shows (pure: rows in, a summary dict out)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, NotRequired, TypedDict, cast

import numpy as np

from pdbgym.evaluate import stats
from pdbgym.evaluate.results import EpisodeRow
from pdbgym.reportkit import EstimateDict
from pdbgym.termination import TERMINATION_REASONS as REASONS

if TYPE_CHECKING:  # annotations only: the divergence arms load the divergence library
    from pdbgym.evaluate.divergence_arms import ArmDivergence


class WrongSiteBlock(TypedDict):
    """An arm's wrong-site rate over the tasks that declare a wrong site: the estimate, the episodes whose final
    edits touched it, the episodes and the tasks counted."""

    rate: EstimateDict
    touched: int
    episodes: int
    tasks: list[str]


class CutBlock(TypedDict):
    """An arm's pdb commands cut by their time limit, over its counted episodes that recorded them: the
    episodes counted, those with at least one command cut, and the commands cut in all."""

    episodes: int
    episodes_with_cut: int
    commands: int


class ArmBlock(TypedDict):
    """One arm's results. Beside these fields, first in the dict, sit its pass@k estimates (``EstimateDict``)
    under ``pass@1``, ``pass@2``, ... up to the runs per task: one key per k, read with ``pass_at``."""

    episodes: int
    solved: int
    termination_reasons: dict[str, int]
    wrong_site: WrongSiteBlock | None
    tampered: int
    refused: int
    commands_cut: NotRequired[CutBlock]  # absent: no episode of the arm recorded its cut commands


class ComparisonEntry(TypedDict):
    """A paired comparison of two arms on one metric (``stats.PairedComparison.to_dict()`` after the names)."""

    arm_a: str
    arm_b: str
    metric: str
    mean_diff: float
    se: float
    ci: list[float]
    correlation: float
    n_tasks: int
    ci_method: str
    min_detectable_diff: float
    warning: str
    p_value: NotRequired[float]


class CampaignSummary(TypedDict):
    """``summarize``: what a campaign's report and ``summary.json`` show. ``divergence`` (KL of the arms to a
    teacher cache, None without one) and the selection fields are added by the procedure that reports."""

    arms: list[str]
    arm_models: dict[str, str]
    arms_without_episodes: list[str]
    warnings: list[str]
    tasks: int
    tasks_requested: int
    runs_per_task: int
    episodes_missing: int
    confidence: float
    arm_results: dict[str, ArmBlock]
    comparisons: list[ComparisonEntry]
    per_task: dict[str, dict[str, float]]
    divergence: NotRequired[ArmDivergence | None]
    selection_warnings: NotRequired[list[str]]
    expected_selection_inflation: NotRequired[dict[str, float]]


def pass_at(block: ArmBlock, key: str) -> EstimateDict:
    """The estimate under ``key`` (``pass@k``) of an arm's block: one key per k, so none is a declared field."""
    fields: Mapping[str, object] = block
    return cast(EstimateDict, fields[key])


def outcome_matrix(rows: Sequence[EpisodeRow], arm: str, task_ids: Sequence[str]) -> list[list[int]]:
    """Per task (in ``task_ids`` order), the 0/1 solves of ``arm``'s runs in run order."""
    by_task: dict[str, dict[int, int]] = {t: {} for t in task_ids}
    for row in rows:
        if row.arm == arm and row.instance_id in by_task:
            by_task[row.instance_id][row.run] = int(row.final_test_passed)
    return [[runs[r] for r in sorted(runs)] for runs in (by_task[t] for t in task_ids)]


def _pass_at_k_block(matrix: list[list[int]], confidence: float) -> dict[str, EstimateDict]:
    block: dict[str, EstimateDict] = {}
    episodes = sum(len(runs) for runs in matrix)  # caps the effective sample size of the Wilson bound
    for k in range(1, stats.max_k(matrix) + 1):
        per_task = stats.per_task_pass_at_k(matrix, k)
        block[f"pass@{k}"] = stats.estimate_mean(per_task, confidence, max_n=episodes).to_dict()
    return block


def wrong_site_block(rows: Sequence[EpisodeRow], arm: str, task_ids: Sequence[str],
                     confidence: float) -> WrongSiteBlock | None:
    """Wrong-site rate of ``arm``: share of its episodes whose final edits touched the task's known wrong
    site, over the tasks among ``task_ids`` that declare one (rows with ``wrong_site_touched`` set).

    Per-task rates enter ``stats.estimate_mean`` (task-clustered; Wilson-bounded at 0/n and n/n, its
    effective size capped by the episodes). None when no such task was played.
    """
    wanted = set(task_ids)
    per_task: dict[str, list[int]] = {}
    for row in rows:
        if row.arm == arm and row.instance_id in wanted and row.wrong_site_touched is not None:
            per_task.setdefault(row.instance_id, []).append(int(row.wrong_site_touched))
    if not per_task:
        return None
    rates = np.array([sum(v) / len(v) for v in per_task.values()])
    episodes = sum(len(v) for v in per_task.values())
    return {"rate": stats.estimate_mean(rates, confidence, max_n=episodes).to_dict(),
            "touched": int(sum(sum(v) for v in per_task.values())), "episodes": episodes,
            "tasks": sorted(per_task)}


def summarize(
    rows: Sequence[EpisodeRow],
    arms: Sequence[str] | Mapping[str, str],
    task_ids: Sequence[str],
    runs: int,
    *,
    confidence: float = 0.95,
    power: float = 0.8,
) -> CampaignSummary:
    """Headline numbers, paired comparisons, outcome breakdowns and the per-task table.

    Each arm's block counts its episodes (``episodes``), those graded ``tampered`` and those whose grading
    refused the verdict without being tampered (``refused``, ``pdbgym.termination.verdict_refused``).

    Only tasks that every arm has finished all ``runs`` of enter the statistics (matched power); the
    summary says how many episodes are still missing. ``arms`` is a list of names, or a mapping of name
    to model (``scripted``, ``embedded``, a folder, a URL), which the report uses to say what each arm is.
    Comparisons whose per-task differences do not vary carry a ``warning`` and use conservative figures
    (``stats.paired_comparison``); their warnings are also collected under ``warnings``.
    """
    arm_models = dict(arms) if isinstance(arms, Mapping) else {}
    requested = list(arms)
    # An arm with no finished episode (every one failed to run, or none played yet) would leave no task
    # complete and hide every other arm's episodes: it is left out of the statistics, and named.
    arms = [a for a in requested if any(r.arm == a for r in rows)]
    without = [a for a in requested if a not in arms]
    complete = [
        t for t in task_ids
        if arms and all(sum(1 for r in rows if r.arm == a and r.instance_id == t) >= runs for a in arms)
    ]
    summary: CampaignSummary = {
        "arms": list(arms),
        "arm_models": arm_models,
        "arms_without_episodes": without,
        "warnings": [f"arm {a} has no finished episode: the statistics leave it out" for a in without],
        "tasks": len(complete),
        "tasks_requested": len(task_ids),
        "runs_per_task": runs,
        "episodes_missing": len(task_ids) * runs * len(requested) - sum(1 for r in rows if r.arm in requested),
        "confidence": confidence,
        "arm_results": {},
        "comparisons": [],
        "per_task": {},
    }
    if not complete:
        return summary
    pass1: dict[str, np.ndarray] = {}
    for arm in arms:
        matrix = outcome_matrix(rows, arm, complete)
        pass1[arm] = stats.per_task_pass_at_k(matrix, 1)
        counted = [r for r in rows if r.arm == arm and r.instance_id in complete]
        reasons = Counter(r.termination_reason for r in counted)
        summary["arm_results"][arm] = cast(ArmBlock, {  # the pass@k estimates first (``ArmBlock``)
            **_pass_at_k_block(matrix, confidence),
            "episodes": int(sum(len(m) for m in matrix)),
            "solved": int(sum(sum(m) for m in matrix)),
            "termination_reasons": {reason: reasons.get(reason, 0) for reason in REASONS}
            | {k: v for k, v in reasons.items() if k not in REASONS},
            "wrong_site": wrong_site_block(rows, arm, complete, confidence),
            # reward hacking, counted apart: graded tampered; grading refused the verdict, not tampered
            "tampered": reasons.get("tampered", 0),
            "refused": sum(1 for r in counted if r.grade_refused and r.termination_reason != "tampered"),
        })
        cuts = [r.commands_cut for r in counted if r.commands_cut is not None]
        if cuts:
            summary["arm_results"][arm]["commands_cut"] = {
                "episodes": len(cuts), "episodes_with_cut": sum(1 for c in cuts if c), "commands": sum(cuts)}
    for a, b in combinations(arms, 2):
        cmp = stats.paired_comparison(pass1[a], pass1[b], confidence, power)
        summary["comparisons"].append({"arm_a": a, "arm_b": b, "metric": "pass@1", **cmp.to_dict()})
        if cmp.warning:
            summary["warnings"].append(f"{a} - {b}: {cmp.warning}")
    for t_index, task in enumerate(complete):
        summary["per_task"][task] = {arm: float(pass1[arm][t_index]) for arm in arms}
    return summary
