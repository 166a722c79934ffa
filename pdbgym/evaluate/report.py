"""Campaign reports: summary JSON, Markdown, a self-contained HTML page, and PNG plots.

Every number links to the transcripts behind it: each arm's headline links to its row of the per-task
table, and each per-task cell links to every run's transcript.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypedDict

from pdbgym.evaluate.analysis import REASONS, CampaignSummary, ComparisonEntry, pass_at
from pdbgym.evaluate.report_sections import (
    HACKING_EXPLANATION,
    DivergenceBlock,
    explanation_lines,
    machine_sections,
    section_blocks,
)
from pdbgym.evaluate.results import EpisodeRow
from pdbgym.evaluate.stats import FALLBACK_VAR_DIFF
from pdbgym.fileio import json_safe, write_json_atomic
from pdbgym.policyname import is_server_url
from pdbgym.reportkit import (
    PCT_DIFF,
    PCT_POINTS,
    Block,
    Bullets,
    Cell,
    Figure,
    Figures,
    Heading,
    Link,
    Page,
    Paragraph,
    Table,
    bounds,
    correlation,
    fmt,
    pct_interval,
    pyplot,
)
from pdbgym.termination import TERMINATION_MEANINGS

if TYPE_CHECKING:  # annotations only: matplotlib loads with the figures (pdbgym[report])
    from matplotlib.figure import Figure

CI_EXPLANATION = (
    "Each interval is clustered by task (runs of one task are not independent). It is the hull of a "
    "task-level bootstrap interval (normal interval from 200 tasks) and a Wilson score interval at the "
    "observed rate with the Korn-Graubard effective sample size p(1-p)/Var(mean), taken as the number of "
    "tasks when per-task rates do not vary; the Wilson bound keeps 0% and 100% from giving a zero-width "
    "interval. The CI method column names what set the bounds."
)
COMPARISON_BASIS = "Paired comparisons use per-task differences of pass@1."
COMPARISON_SD0 = (
    "When every task differs alike (sd 0) the "
    f"SE and detectable difference use the conservative variance {FALLBACK_VAR_DIFF} per task (two "
    "independent Bernoulli(0.5) arms) and the CI is Newcombe's hybrid score interval;"
)
SD0_MARK = "\u2020"  # a dagger after the mean diff: the row fell back to the conservative sd (sd 0)


def comparison_note(summary: CampaignSummary) -> str:
    """How the paired-comparison table is computed; the conservative fallback and its mark are explained
    only when some row carries the mark (a note must not promise marks no row has)."""
    fallback = any(c.get("warning") for c in summary.get("comparisons", []))
    return f"{COMPARISON_BASIS} {COMPARISON_SD0} such rows are marked {SD0_MARK} after the mean diff." \
        if fallback else COMPARISON_BASIS


def describe_arm(model: str) -> str:
    """What an arm's policy is, in words, from its model spec (``scripted``, ``embedded``, folder, URL)."""
    if model == "scripted":
        return ("oracle: replays the task's reference fix through the debugger tools; it measures the "
                "harness and the grader, not a model")
    if model == "embedded":
        return "the embedded SmolLM2-135M-Instruct (GGUF), sampled locally"
    if is_server_url(model):
        return f"a model behind the OpenAI-compatible server {model}"
    return f"the local model folder {model}"


def explanations(summary: CampaignSummary) -> list[tuple[str, list[str]]]:
    """The report's reading guide: (heading, lines) for arms, intervals and termination reasons."""
    models = summary.get("arm_models", {})
    arms = [f"{arm}: {describe_arm(models[arm]) if arm in models else 'policy not recorded'}"
            for arm in summary["arms"]]
    reasons = [*(f"{reason}: {TERMINATION_MEANINGS[reason]}" for reason in REASONS), HACKING_EXPLANATION]
    return [("Arms", arms), ("Intervals", [CI_EXPLANATION, comparison_note(summary), *explanation_lines(summary)]),
            ("Termination reasons", reasons)]


def _pass_keys(summary: CampaignSummary) -> list[str]:
    keys: list[str] = []
    for block in summary["arm_results"].values():
        keys = [k for k in block if k.startswith("pass@")]
        break
    return sorted(keys, key=lambda k: int(k.split("@")[1]))


ARM_SPREAD = 0.3  # the width (in k) over which the arms' points at one k are spread, so none hides another


def arm_offsets(n: int) -> list[float]:
    """x offsets of ``n`` arms at one k: evenly spread over ``ARM_SPREAD``, centred on the k (0 for one arm)."""
    if n <= 1:
        return [0.0] * n
    step = ARM_SPREAD / (n - 1)
    return [step * i - ARM_SPREAD / 2 for i in range(n)]


def pass_at_k_figure(plt: ModuleType, summary: CampaignSummary) -> Figure:
    """pass@k per arm with its task-clustered CI as error bars (visible for a single k too); the arms are
    offset a little along x so that no arm's point or bar hides another's."""
    arms, keys = summary["arms"], _pass_keys(summary)
    ks = [int(k.split("@")[1]) for k in keys]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for arm, offset in zip(arms, arm_offsets(len(arms)), strict=True):
        block = summary["arm_results"][arm]
        means = [pass_at(block, k)["mean"] for k in keys]
        below = [max(0.0, m - pass_at(block, k)["ci"][0]) for m, k in zip(means, keys, strict=True)]
        above = [max(0.0, pass_at(block, k)["ci"][1] - m) for m, k in zip(means, keys, strict=True)]
        ax.errorbar([k + offset for k in ks], means, yerr=[below, above], marker="o", capsize=4, label=arm)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xticks(ks)
    if ks:
        ax.set_xlim(min(ks) - 0.5, max(ks) + 0.5)
    ax.legend()
    ax.set_title("pass@k with task-clustered CIs")
    fig.tight_layout()
    return fig


def plot_figures(summary: CampaignSummary, out_dir: Path) -> dict[str, Path]:
    """pass@k curves, the per-task solve heatmap and the outcome breakdown, as PNG files."""
    plt = pyplot()
    arms, figures = summary["arms"], {}
    fig = pass_at_k_figure(plt, summary)
    figures["pass_at_k"] = out_dir / "pass_at_k.png"
    fig.savefig(figures["pass_at_k"], dpi=110)
    plt.close(fig)

    figures["heatmap"] = _plot_heatmap(plt, summary, out_dir / "per_task_heatmap.png")

    fig, ax = plt.subplots(figsize=(6.5, 3))
    left = [0] * len(arms)
    for reason in REASONS:
        counts = [summary["arm_results"][a]["termination_reasons"].get(reason, 0) for a in arms]
        ax.barh(arms, counts, left=left, label=reason)
        left = [x + y for x, y in zip(left, counts, strict=True)]
    ax.set_xlabel("episodes")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("how episodes ended")
    figures["outcomes"] = out_dir / "outcomes.png"
    fig.tight_layout()
    fig.savefig(figures["outcomes"], dpi=110)
    plt.close(fig)
    return figures


def heatmap_figure(plt: ModuleType, summary: CampaignSummary) -> Figure:
    """Per-task solve rate, tasks down and arms across; arm labels slanted so long names do not overlap."""
    arms, tasks = summary["arms"], list(summary["per_task"])
    longest = max(len(a) for a in arms)
    # Width: room per arm column plus the task labels; height grows with tasks and with slanted arm names.
    fig, ax = plt.subplots(figsize=(2.5 + 0.9 * len(arms), 1.6 + 0.28 * len(tasks) + 0.06 * longest),
                           layout="constrained")
    grid = [[summary["per_task"][t][a] for a in arms] for t in tasks]
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(arms)), arms, rotation=35, ha="right", rotation_mode="anchor", fontsize=8)
    ax.set_yticks(range(len(tasks)), tasks, fontsize=7)
    fig.colorbar(image, ax=ax, label="solve rate", fraction=0.08, pad=0.04)
    ax.set_title("per-task solve rate")
    return fig


def _plot_heatmap(plt: ModuleType, summary: CampaignSummary, path: Path) -> Path:
    fig = heatmap_figure(plt, summary)
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the saved box holds every label, colour bar's too
    plt.close(fig)
    return path


def _runs_by_cell(rows: Sequence[EpisodeRow]) -> dict[tuple[str, str], list[EpisodeRow]]:
    cells: dict[tuple[str, str], list[EpisodeRow]] = {}
    for row in sorted(rows, key=lambda r: r.run):
        cells.setdefault((row.instance_id, row.arm), []).append(row)
    return cells


COMPARISON_HEAD = ["A", "B", "mean diff", "CI", "SE", "correlation", "min. detectable diff (80% power)"]


def _headline(summary: CampaignSummary) -> tuple[list[str], list[list[Cell]]]:
    """Head and rows of the headline table: each arm's pass@k in percent, linked to its per-task row."""
    keys = _pass_keys(summary)
    rows: list[list[Cell]] = []
    for arm in summary["arms"]:
        block = summary["arm_results"][arm]
        rows.append([Link(arm, f"#arm-{arm}"), *(pct_interval(pass_at(block, k)) for k in keys),
                     f"{block['solved']} / {block['episodes']}", pass_at(block, "pass@1")["ci_method"]])
    return ["arm", *keys, "solved / episodes", "CI method"], rows


def comparison_rows(summary: CampaignSummary) -> list[list[str]]:
    """Paired comparisons in percent points; the correlation is n/a where a side does not vary; the mean
    diff of a row that fell back to the conservative sd (sd 0) carries ``SD0_MARK``."""
    return [[c["arm_a"], c["arm_b"],
             fmt(100 * c["mean_diff"], PCT_DIFF) + (f" {SD0_MARK}" if c.get("warning") else ""),
             bounds(100 * c["ci"][0], 100 * c["ci"][1], PCT_DIFF), fmt(100 * c["se"], PCT_POINTS),
             correlation(c["correlation"]), fmt(100 * c["min_detectable_diff"], PCT_POINTS)]
            for c in summary["comparisons"]]


def _endings(summary: CampaignSummary) -> list[list[Cell]]:
    return [[arm, *(summary["arm_results"][arm]["termination_reasons"].get(r, 0) for r in REASONS)]
            for arm in summary["arms"]]


def _per_task(summary: CampaignSummary, rows: Sequence[EpisodeRow]) -> list[list[Cell]]:
    """One row per task: each arm's runs as marks (✓ solved, ✗ not, ! tampered, ? verdict refused), each
    linking to its transcript."""
    cells = _runs_by_cell(rows)
    return [[task, *([Link(_mark(r), r.transcript, "ok" if r.final_test_passed else "bad")
                      for r in cells.get((task, a), [])] for a in summary["arms"])]
            for task in summary["per_task"]]


def _mark(row: EpisodeRow) -> str:
    if row.termination_reason == "tampered":
        return "!"
    return "?" if row.grade_refused else "✓" if row.final_test_passed else "✗"


def report_page(summary: CampaignSummary, rows: Sequence[EpisodeRow], title: str, figures: dict[str, Path]) -> Page:
    """The campaign report: headline, comparisons, endings, the sections, the per-task marks, the figures
    (``plot_figures``) and the reading guide."""
    arms = summary["arms"]
    conf = int(100 * summary["confidence"])
    blocks: list[Block] = [Paragraph(f"{summary['tasks']} tasks x {summary['runs_per_task']} runs per arm. "
                                     f"Values in percent with {conf}% CIs clustered by task.")]
    if summary["episodes_missing"] > 0:
        blocks.append(Paragraph(f"**Incomplete:** {summary['episodes_missing']} episodes not run yet.", "warn"))
    blocks += [Paragraph(f"**Warning (selection bias):** {warning}", "warn")
               for warning in summary.get("selection_warnings", [])]
    blocks += [Paragraph(f"**Warning:** {warning}", "warn") for warning in summary.get("warnings", [])]
    blocks.append(Table(*_headline(summary)))
    if summary["comparisons"]:
        blocks += [Heading("Paired comparisons (pass@1, A - B)"), Table(COMPARISON_HEAD, comparison_rows(summary))]
    blocks += [Heading("How episodes ended"), Table(["arm", *REASONS], _endings(summary)), *section_blocks(summary)]
    blocks += [Heading("Per task (each mark links to that run's transcript)"),
               Table(["task", *arms], _per_task(summary, rows), anchors=[f"arm-{arm}" for arm in arms]),
               Figures([Figure(figures["pass_at_k"], "pass@k"), Figure(figures["heatmap"], "per-task"),
                        Figure(figures["outcomes"], "outcomes")])]
    for heading, items in explanations(summary):
        blocks += [Heading(heading), Bullets(items)]
    return Page(title, blocks)


class MachineSummary(TypedDict):
    """The ``--json`` summary (``machine_summary``): each arm's block (``ArmBlock`` and, with a teacher cache,
    its ``divergence`` entry) by name."""

    selection_warnings: list[str]
    warnings: list[str]
    tasks: int
    runs_per_task: int
    arms: dict[str, dict[str, object]]
    comparisons: list[ComparisonEntry]
    divergence: DivergenceBlock | None


def machine_summary(summary: CampaignSummary) -> MachineSummary:
    """The ``--json`` summary: per arm ``pass@1``, ``pass@3``... each with mean and CI, its ``wrong_site``
    rate (or null) and, with a teacher cache, its ``divergence`` entry; the cache's paired KL differences
    under ``divergence``."""
    arms: dict[str, dict[str, object]] = {arm: {k: v for k, v in block.items()}
                                          for arm, block in summary["arm_results"].items()}
    return {
        "selection_warnings": summary.get("selection_warnings", []),
        "warnings": summary.get("warnings", []),
        "tasks": summary["tasks"],
        "runs_per_task": summary["runs_per_task"],
        "arms": arms,
        "comparisons": summary["comparisons"],
        **machine_sections(summary, arms),
    }


def write_report(summary: CampaignSummary, rows: Sequence[EpisodeRow], out_dir: Path, title: str,
                 json_path: Path | None = None) -> Path:
    """Write summary.json, report.md, report.html and the PNGs into ``out_dir``; return the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out_dir / "summary.json", json_safe(summary))
    if json_path is not None:
        write_json_atomic(json_path, json_safe(machine_summary(summary)))
    if not summary["arm_results"]:
        return out_dir / "summary.json"
    _, page = report_page(summary, rows, title, plot_figures(summary, out_dir)).write(out_dir, "report")
    return page
