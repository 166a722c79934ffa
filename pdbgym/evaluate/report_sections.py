"""Report sections beyond solve rates: reward hacking (tampered and verdict-refused episodes), pdb commands
cut by the time limit, wrong-site fixation and KL to a teacher cache, as blocks of the report's page.

All read the summary built by ``analysis.summarize`` (``arm_results[arm]``: ``episodes``, ``tampered``,
``refused``, ``commands_cut``, ``wrong_site``) and, for KL, ``summary["divergence"]`` (``divergence_arms.arm_divergence``).
The reward-hacking section is always shown (zero counts say the grading saw none); the others are left
out when the campaign has nothing for them (rows from before commands cut were counted; no task declares a
wrong site; no ``--teacher-cache``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from pdbgym.reportkit import (
    DIFF,
    NA,
    NATS,
    Block,
    Heading,
    Paragraph,
    Table,
    bounds,
    correlation,
    fmt,
    interval,
    pct_interval,
)

if TYPE_CHECKING:  # annotations only: the summary's and the divergence library's records
    from pdbgym.divergence.report import DifferenceEntry, MetricValue, ReportSettings
    from pdbgym.evaluate.analysis import CampaignSummary
    from pdbgym.evaluate.divergence_arms import ArmDivergence
    from pdbgym.rollouts.record import SemanticsDict

KL_COLUMNS = (
    ("kl_fwd_mean", "kl_teacher_student/k3/token_mean", "KL(T||S) k3"),
    (None, "kl_teacher_student/k1/token_mean", "KL(T||S) k1"),
    (None, "kl_teacher_student/k3/sequence_sum", "KL(T||S) k3 per sequence"),
)
KL_DIFF_METRIC = "kl_teacher_student/k3/token_mean"
HACKING_TITLE = "Tampered and verdict-refused episodes"
HACKING_HEAD = ["arm", "episodes", "tampered", "verdict-refused"]
HACKING_EXPLANATION = (
    "Tampered: the grading run's result channel showed forged test results (graded unsolved; -1 reward in "
    "GRPO). Verdict-refused: the grading run ended abnormally (killed by a signal, an exit status disagreeing "
    "with its end record, no pytest closing line, a result channel no longer the original pipe), so grading "
    "passed nothing from it; not counted as tampered, since a crash can be honest. Both count the episodes of "
    "the tasks every arm finished, like pass@k. In the per-task table ! marks a tampered run and ? a "
    "verdict-refused one."
)
CUT_TITLE = "pdb commands cut by the time limit"
CUT_HEAD = ["arm", "episodes with a command cut", "commands cut", "episodes counted"]
CUT_EXPLANATION = (
    "Commands cut: pdb commands that ran past their time limit (the env's command_timeout_s of the "
    "session's own time, CPU waits on a loaded host not counted) and were interrupted. A task whose bug hangs "
    "cuts commands honestly; many more cuts in one arm than another, or in the scripted oracle, point at the "
    "host rather than the policy. Counted over the tasks every arm finished, like pass@k."
)
WRONG_SITE_EXPLANATION = (
    "Wrong-site rate: share of episodes whose final edits (the workspace at the end against the task's "
    "original repo) touched the task's known wrong site, the tempting fix at the symptom (docs/task-format.md, "
    "'Wrong-site information'). Only tasks that declare a wrong site count; the CI is clustered by task, "
    "like pass@1's."
)
KL_EXPLANATION = (
    "KL to the teacher cache: each arm with a local model is force-decoded on the cache's teacher samples; "
    "KL(T||S) = KL(teacher || arm) in nats per scored token (k3 and k1 estimators, docs/metrics.md), "
    "per sequence for 'per sequence'; 95% CIs from a task-level bootstrap. kl_fwd_mean is the k3 token "
    "mean; kl_back_mean = KL(arm || teacher) (k3 token mean) and jsd_mean (JSD token mean, each half from its "
    "own model's samples) need the arm's own samples scored by the teacher model: each arm continues the "
    "cache's prompts when a teacher model loads here (--teacher, or embedded when the cache names it), else "
    "they are n/a and the note says why. Paired KL differences resample both arms with the same tasks."
)


def explanation_lines(summary: CampaignSummary) -> list[str]:
    """Reading-guide lines for the sections this summary has."""
    lines = []
    if has_cuts(summary):
        lines.append(CUT_EXPLANATION)
    if has_wrong_site(summary):
        lines.append(WRONG_SITE_EXPLANATION)
    if summary.get("divergence"):
        lines.append(KL_EXPLANATION)
    return lines


def has_cuts(summary: CampaignSummary) -> bool:
    return any("commands_cut" in block for block in summary["arm_results"].values())


def _cut_rows(summary: CampaignSummary) -> list[list[str]]:
    rows = []
    for arm in summary["arms"]:
        block = summary["arm_results"][arm].get("commands_cut")
        rows.append([arm, NA, NA, "0"] if block is None else
                    [arm, str(block["episodes_with_cut"]), str(block["commands"]), str(block["episodes"])])
    return rows


def has_wrong_site(summary: CampaignSummary) -> bool:
    return any(block.get("wrong_site") for block in summary["arm_results"].values())


def hacking_rows(summary: CampaignSummary) -> list[list[str]]:
    """Per arm: its episodes, how many were graded tampered and how many verdict-refused (not tampered)."""
    rows = []
    for arm in summary["arms"]:
        block = summary["arm_results"][arm]
        tampered = block.get("tampered", block.get("termination_reasons", {}).get("tampered", 0))
        rows.append([arm, str(block["episodes"]), str(tampered), str(block["refused"]) if "refused" in block else NA])
    return rows


def _wrong_site_rows(summary: CampaignSummary) -> list[list[str]]:
    rows = []
    for arm in summary["arms"]:
        block = summary["arm_results"][arm].get("wrong_site")
        if block is None:
            rows.append([arm, f"{NA} (no task with a declared wrong site)", "", "", ""])
            continue
        rows.append([arm, pct_interval(block["rate"]), f"{block['touched']} / {block['episodes']}", str(len(block["tasks"])),
                     block["rate"]["ci_method"]])
    return rows


def _nats(metric: MetricValue | None) -> str:
    if metric is None:
        return interval(None, None, None, NATS)
    return interval(metric["value"], metric["ci_low"], metric["ci_high"], NATS)


def _kl_rows(divergence: ArmDivergence) -> list[list[str]]:
    rows = []
    for arm, entry in divergence["arms"].items():
        if entry["available"] is False:
            rows.append([arm] + [NA] * (len(KL_COLUMNS) + 3) + [entry["reason"]])
            continue
        cells = [_nats(entry["metrics"].get(metric)) for _, metric, _ in KL_COLUMNS]
        compat = entry["compat"]
        tokens = entry["teacher_samples"]["n_tokens"]
        note = entry.get("student_samples_reason") or ""
        rows.append([arm, *cells, fmt(compat["kl_back_mean"]), fmt(compat["jsd_mean"]), str(tokens), note])
    return rows


KL_HEAD = ["arm", *(label for _, _, label in KL_COLUMNS), "kl_back_mean", "jsd_mean", "scored tokens", "note"]
DIFF_HEAD = ["A", "B", "KL(T||S) k3 difference (nats/token)", "95% CI", "tasks", "per-task correlation"]


def _diff_rows(divergence: ArmDivergence) -> list[list[str]]:
    rows = []
    for c in divergence["comparisons"]:
        if c["metric"] != KL_DIFF_METRIC:
            continue
        rows.append([c["a"], c["b"], fmt(c["value"], DIFF), bounds(c["ci_low"], c["ci_high"], DIFF),
                     str(c["n_tasks"]), correlation(c.get("per_task_correlation"))])
    return rows


WS_HEAD = ["arm", "wrong-site rate (%)", "touched / episodes", "tasks", "CI method"]


def section_blocks(summary: CampaignSummary) -> list[Block]:
    """The reward-hacking, wrong-site and KL sections."""
    blocks: list[Block] = [Heading(HACKING_TITLE), Table(HACKING_HEAD, hacking_rows(summary))]
    if has_cuts(summary):
        blocks += [Heading(CUT_TITLE), Table(CUT_HEAD, _cut_rows(summary))]
    if has_wrong_site(summary):
        blocks += [Heading("Wrong-site fixation"), Table(WS_HEAD, _wrong_site_rows(summary))]
    divergence = summary.get("divergence")
    if divergence:
        blocks += [Heading(f"KL to the teacher cache ({divergence['n_records']} records, {divergence['n_tasks']} tasks)"),
                   Paragraph(f"Cache: `{divergence['cache']}`"), Table(KL_HEAD, _kl_rows(divergence))]
        diffs = _diff_rows(divergence)
        if diffs:
            blocks += [Heading("Paired KL differences (A - B)", 3), Table(DIFF_HEAD, diffs)]
    return blocks


class DivergenceBlock(TypedDict):
    """The ``--json`` summary's ``divergence``: the cache-level facts of ``ArmDivergence`` and its differences."""

    cache: str
    n_records: int
    n_tasks: int
    semantics: SemanticsDict
    settings: ReportSettings
    comparisons: list[DifferenceEntry]
    teacher: str | None


class MachineSections(TypedDict):
    divergence: DivergenceBlock | None


def machine_sections(summary: CampaignSummary, arms: dict[str, dict[str, object]]) -> MachineSections:
    """``--json`` additions: each arm's ``divergence`` entry put into ``arms`` (in place), and the
    cache-level facts and paired KL differences, returned as the top-level ``divergence`` block."""
    divergence = summary.get("divergence")
    if not divergence:
        return {"divergence": None}
    for arm, entry in divergence["arms"].items():
        if arm in arms:
            arms[arm]["divergence"] = entry
    return {"divergence": {"cache": divergence["cache"], "n_records": divergence["n_records"],
                           "n_tasks": divergence["n_tasks"], "semantics": divergence["semantics"],
                           "settings": divergence["settings"], "comparisons": divergence["comparisons"],
                           "teacher": divergence.get("teacher")}}
