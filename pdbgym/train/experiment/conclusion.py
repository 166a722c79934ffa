"""The experiment report's "What this run shows": what the held-out evaluation says about SFT, in words.

Every sentence is computed from the run: the campaign summary (pass@1 with task-clustered CIs and paired
comparisons, ``evaluate.analysis.summarize``), the valid tool-call rates (``evaluate.arm_figures``) and the
KL to the oracle per arm, and it says what those numbers support at the 95% level and what they do not.
A difference is called a change only where its interval leaves 0 out (pass@1, valid-call rate: the paired
per-task interval of ``evaluate.stats.paired_comparison``) or where the two arms' KL intervals do not
overlap. GRPO's figures have their own sections of the report; these sentences compare the SFT model
(``TRAINED``) with the base.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pdbgym.evaluate import stats
from pdbgym.reportkit import NATS, PCT_DIFF, PCT_POINTS, bounds, interval

TRAINED, BASE = "sft-best", "base"
REPEATS_WORTH_SAYING = 3  # the same call this many times in a row in one episode is named
KL = tuple[float, float | None, float | None]


def _points(estimate: dict[str, Any]) -> str:
    """A share's estimate in percent: ``"91.4% [60.1, 100.0]"``."""
    low, high = estimate["ci"]
    return f"{100 * estimate['mean']:.1f}% {bounds(100 * low, 100 * high, PCT_POINTS)}"


def _names(arms: list[str]) -> str:
    return arms[0] if len(arms) == 1 else ", ".join(arms[:-1]) + f" and {arms[-1]}"


def _direction(low: float, high: float, up: str, down: str, flat: str) -> str:
    return up if low > 0 else down if high < 0 else flat


def _solving(arms: Mapping[str, str], summary: dict[str, Any]) -> list[str]:
    results = summary["arm_results"]
    said = [f"{a} {results[a]['solved']} of {results[a]['episodes']}" for a in arms if a in results]
    sentences = [f"Held-out episodes solved: {', '.join(said)} ({summary['tasks']} tasks, "
                 f"{summary['runs_per_task']} run(s) each)."]
    oracles = [a for a, m in arms.items() if m == "scripted" and a in results]
    for arm in oracles:
        r = results[arm]
        sentences.append(f"The {arm} arm replays each task's reference fix, so its {r['solved']} of {r['episodes']} "
                         "is an upper bound set by the tasks and settings, not a model's skill.")
        sentences += _oracle_shortfall(arm, r, summary.get("per_task", {}))
    unsolved = [a for a in arms if a in results and a not in oracles and results[a]["solved"] == 0]
    if unsolved:
        reach = max(results[a]["pass@1"]["ci"][1] for a in unsolved)
        sentences.append(f"For {_names(unsolved)}, 0 solved is no evidence about solving ability either way: "
                         f"pass@1's 95% interval still reaches {100 * reach:.1f}%.")
    return sentences


def _oracle_shortfall(arm: str, result: dict[str, Any], per_task: dict[str, dict[str, float]]) -> list[str]:
    """Where the reference fix itself failed, which tasks and why, if the episodes say: a context that cuts
    the replay short is a setting to raise, and no arm can be credited on those tasks."""
    missed = sorted(task for task, rates in per_task.items() if rates.get(arm, 1.0) < 1.0)
    if result["solved"] >= result["episodes"] or not missed:
        return []
    named = _names(missed[:5]) + (f" and {len(missed) - 5} more" if len(missed) > 5 else "")
    overflows = result.get("termination_reasons", {}).get("ctx_overflow", 0)
    why = (f"; {overflows} of its episodes ran out of context (ctx_overflow), and one that runs out before its "
           "edit is cut short by the context setting, not the task: raise max_context_tokens, since no arm can "
           "solve what the reference fix cannot fit") if overflows else ""
    return [f"It missed {result['episodes'] - result['solved']} episode(s), on {named}{why}."]


def _stored_comparison(summary: dict[str, Any], a: str, b: str) -> dict[str, Any] | None:
    """The summary's paired pass@1 comparison of ``a`` and ``b`` in the direction it is stored (and shown in
    the evaluation report's paired-comparison table): ``a - b`` or ``b - a``."""
    return next((c for c in summary.get("comparisons", []) if {c["arm_a"], c["arm_b"]} == {a, b}), None)


def _trained_vs_base(summary: dict[str, Any]) -> list[str]:
    """Pass@1 of the SFT model against the base, as the same difference, in the same direction, as the
    evaluation report's row."""
    c = _stored_comparison(summary, TRAINED, BASE)
    if c is None:
        return []
    low, high = c["ci"]
    said = interval(100 * c["mean_diff"], 100 * low, 100 * high, PCT_DIFF)
    raised, lowered = "SFT raised it", "SFT lowered it"
    up, down = (raised, lowered) if c["arm_a"] == TRAINED else (lowered, raised)
    change = _direction(low, high, up, down, "the interval holds 0: no detectable change")
    return [f"Pass@1, {c['arm_a']} - {c['arm_b']}: {said} points paired by task; {change}."]


def _valid_calls(arms: Mapping[str, str], validity: dict[str, dict[str, Any]]) -> list[str]:
    sentences = []
    base, sft = validity.get(BASE, {}), validity.get(TRAINED, {})
    shared = sorted(set(base.get("per_task_rate", {})) & set(sft.get("per_task_rate", {})))
    if shared and base.get("episode_rate") and sft.get("episode_rate"):
        diff = stats.paired_comparison(np.array([sft["per_task_rate"][t] for t in shared]),
                                       np.array([base["per_task_rate"][t] for t in shared]))
        change = _direction(diff.ci_low, diff.ci_high, "SFT raised it", "SFT lowered it",
                            "the interval holds 0: no detectable change")
        said = interval(100 * diff.mean_diff, 100 * diff.ci_low, 100 * diff.ci_high, PCT_DIFF)
        sentences.append(f"Share of turns that are a valid tool call, per episode: {BASE} "
                         f"{_points(base['episode_rate'])}, {TRAINED} {_points(sft['episode_rate'])}; {TRAINED} "
                         f"minus {BASE} {said} points paired over {len(shared)} task(s): {change}.")
    repeaters = [(a, v["longest_repeat"]) for a, v in validity.items()
                 if arms.get(a) != "scripted" and v.get("longest_repeat", 0) >= REPEATS_WORTH_SAYING]
    if repeaters:
        said = ", ".join(f"{a} sent one call {n} times in a row" for a, n in repeaters)
        sentences.append(f"Valid is not the same as useful: {said} within an episode.")
    return sentences


def kl_estimates(arms: Mapping[str, str], kl: dict[str, Any] | None) -> dict[str, KL]:
    """arm -> (KL, CI low, CI high) in nats/token, for the arms ``oracle_kl`` scored."""
    found: dict[str, KL] = {}
    for arm in arms:
        e = (kl or {}).get("arms", {}).get(arm, {})
        if e.get("available"):
            found[arm] = (e["kl_per_token"], e["ci_low"], e["ci_high"])
    return found


def _kl(estimates: dict[str, KL]) -> list[str]:
    if not {BASE, TRAINED} <= set(estimates):
        return []
    (b, b_low, b_high), (s, s_low, s_high) = estimates[BASE], estimates[TRAINED]
    said = f"from {interval(b, b_low, b_high, NATS)} ({BASE}) to {interval(s, s_low, s_high, NATS)} nats/token ({TRAINED})"
    if b_low is None or b_high is None or s_low is None or s_high is None:
        return [f"KL to the oracle went {said}, without intervals to judge the change by."]
    if s_high < b_low:
        return [f"KL to the oracle fell {said}; the intervals do not overlap: SFT moved the model's "
                "distribution toward the oracle's tokens on held-out tasks."]
    if s_low > b_high:
        return [f"KL to the oracle rose {said}; the intervals do not overlap: SFT moved the model away from "
                "the oracle's tokens on held-out tasks."]
    return [f"KL to the oracle went {said}; the intervals overlap, so this run shows no clear change."]


def _limits(summary: dict[str, Any], validity: dict[str, dict[str, Any]], estimates: dict[str, KL]) -> list[str]:
    """What the run does not show."""
    results = summary["arm_results"]
    sentences = []
    if BASE in results and TRAINED in results:
        closer = []
        if {BASE, TRAINED} <= set(estimates) and estimates[TRAINED][0] < estimates[BASE][0]:
            closer.append("a lower KL")
        if (validity.get(TRAINED, {}).get("rate") or 0) > (validity.get(BASE, {}).get("rate") or 0):
            closer.append("more valid tool calls")
        if closer and results[TRAINED]["solved"] <= results[BASE]["solved"]:
            sentences.append(f"It does not show that imitation helps debugging: {' and '.join(closer)} did not "
                             f"turn into more solved episodes here ({TRAINED} {results[TRAINED]['solved']}, "
                             f"{BASE} {results[BASE]['solved']}).")
    c = _stored_comparison(summary, TRAINED, BASE) or next(iter(summary.get("comparisons", [])), None)
    if c is not None:
        sentences.append(f"It cannot tell apart arms whose pass@1 differs by less than about "
                         f"{100 * c['min_detectable_diff']:.0f} points ({c['arm_a']} - {c['arm_b']}): that is the "
                         f"smallest difference {summary['tasks']} held-out task(s) with "
                         f"{summary['runs_per_task']} run(s) each detect at 80% power.")
    return sentences


def what_this_run_shows(arms: Mapping[str, str], summary: dict[str, Any], validity: dict[str, dict[str, Any]],
                        kl: dict[str, Any] | None) -> list[str]:
    """The conclusion's sentences, in order: solving, pass@1 of SFT against base, valid tool calls, KL, limits.
    ``summary``: the held-out campaign's (``OUT/eval/summary.json``); ``kl``: ``oracle_kl``'s file."""
    if not summary.get("tasks"):
        return ["No held-out task has finished in every arm yet, so this run shows nothing about the arms; "
                "run it again with the same --out to play the missing episodes."]
    estimates = kl_estimates(arms, kl)
    return (_solving(arms, summary) + _trained_vs_base(summary) + _valid_calls(arms, validity) + _kl(estimates)
            + _limits(summary, validity, estimates))
