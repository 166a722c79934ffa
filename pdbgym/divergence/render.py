"""Presenting a divergence report: rich table, atomic JSON file, PNG plot (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table

from pdbgym.divergence.report import HEADLINE, DivergenceReport, MetricValue
from pdbgym.fileio import atomic_target, write_json_atomic
from pdbgym.reportkit import DIFF, NATS, bounds, correlation, fmt, interval, pct, pyplot

TABLE_METRICS = (
    ("KL(T||S) k3", "kl_teacher_student/k3/token_mean"),
    ("KL(T||S) k1", "kl_teacher_student/k1/token_mean"),
    ("KL(T||S) k3 seq-sum", "kl_teacher_student/k3/sequence_sum"),
    ("KL(S||T) k3", "kl_student_teacher/k3/token_mean"),
    ("JSD", "jsd/token_mean"),
)


def _cell(metric: MetricValue | None) -> str:
    if metric is None:
        return interval(None, None, None, NATS)
    return interval(metric["value"], metric["ci_low"], metric["ci_high"], NATS)


def report_table(report: DivergenceReport) -> Table:
    """One row per student: token-mean metrics (nats/token) with bootstrap CIs, extreme shares."""
    table = Table(title="Divergence from the teacher (nats/token unless noted; [95% task-bootstrap CI])")
    table.add_column("student")
    for label, _ in TABLE_METRICS:
        table.add_column(label, justify="right")
    table.add_column(f"|log r|>{report['settings']['extreme_threshold_nats']:g}", justify="right")
    table.add_column("tokens", justify="right")
    for student in report["students"]:
        shares = student["teacher_samples"]
        table.add_row(
            student["name"],
            *(_cell(student["metrics"].get(key)) for _, key in TABLE_METRICS),
            pct(shares["extreme_share"], 2),
            str(shares["n_tokens"]),
        )
    return table


def differences_table(report: DivergenceReport, metric: str = HEADLINE) -> Table:
    """Paired differences a - b of one metric over shared tasks."""
    table = Table(title=f"Paired differences of {metric} (a - b, task bootstrap)")
    for column in ("a", "b", "difference", "CI", "tasks", "per-task r"):
        table.add_column(column)
    for row in report["paired_differences"]:
        if row["metric"] != metric:
            continue
        table.add_row(row["a"], row["b"], fmt(row["value"], DIFF), bounds(row["ci_low"], row["ci_high"], DIFF),
                      str(row["n_tasks"]), correlation(row["per_task_correlation"]))
    return table


def write_report(report: DivergenceReport, path: Path) -> None:
    write_json_atomic(Path(path), report)


def plot_report(report: DivergenceReport, path: Path) -> None:
    """Left: headline metrics per student with CIs. Right: per-task KL(T||S) k3 per student."""
    plt = pyplot()
    students = report["students"]
    # Per-token metrics only: a per-sequence sum would dwarf them on a shared axis.
    keys = [(label, key) for label, key in TABLE_METRICS
            if key.endswith("token_mean") and any(s["metrics"].get(key) for s in students)]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(1, len(students))
    for i, student in enumerate(students):
        values, errors = [], [[], []]
        for _, key in keys:
            metric = student["metrics"].get(key) or {"value": None}
            value = metric["value"] if metric["value"] is not None else float("nan")
            values.append(value)
            errors[0].append(max(0.0, value - (metric.get("ci_low") or value)))
            errors[1].append(max(0.0, (metric.get("ci_high") or value) - value))
        positions = [k + i * width for k in range(len(keys))]
        left.bar(positions, values, width, yerr=errors, capsize=3, label=student["name"])
    left.set_xticks([k + width * (len(students) - 1) / 2 for k in range(len(keys))])
    left.set_xticklabels([label for label, _ in keys], rotation=20, ha="right")
    left.set_ylabel("nats per token")
    left.legend(fontsize=8)
    first = students[0]["per_task"][HEADLINE]
    order = sorted(first, key=lambda task: first[task] or 0.0)  # None (no finite value) as 0.0
    for student in students:
        per_task = student["per_task"][HEADLINE]
        right.plot(range(len(order)), [per_task.get(t) for t in order], marker=".", label=student["name"])
    right.set_xlabel(f"task (sorted by {students[0]['name']})")
    right.set_ylabel("KL(teacher||student), k3, nats/token")
    right.legend(fontsize=8)
    fig.tight_layout()
    with atomic_target(Path(path)) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
