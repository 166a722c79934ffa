"""Training reports (SFT, DAgger, GRPO): Markdown, a self-contained HTML page, a JSON twin and PNG plots.

Input is what a run logged: ``history`` (one dict per logged step: ``step`` plus numeric metrics such as
``loss``, ``eval_loss``, ``learning_rate``, ``reward``, ``kl``, ``beta``), a ``summary`` (name -> value)
and optional ``tables`` (title -> rows of equal keys, e.g. one row per DAgger iteration or val gate; a
cell may be a :class:`Link` or a list of them: a checkpoint folder, transcripts).

Without ``panels`` each metric gets one plot against the step and a metric and its ``eval_`` twin share
a plot (SFT, DAgger). With ``panels`` (GRPO) the named panels come first, each several metrics on one
plot with its meaning written under it, and the metrics no panel names follow as one plot each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from pdbgym.fileio import write_json_atomic
from pdbgym.reportkit import Bullets, Cell, Figure, Figures, Heading, Link, Page, Table, pyplot
from pdbgym.train.records import LogRow

if TYPE_CHECKING:  # annotations only: matplotlib loads with the first plot
    from matplotlib.figure import Figure

REPORT_NAME = "training_report"
Summary = Mapping[str, Cell]  # name -> value, the report's first table
Tables = Mapping[str, Sequence[Mapping[str, Cell]]]  # title -> rows of equal keys
_SKIP = {"step", "epoch", "total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second",
         "eval_runtime", "eval_samples_per_second", "eval_steps_per_second"}


@dataclass(frozen=True)
class Panel:
    """One named plot: ``keys`` of the history against the step, plus optional marks.

    ``points``: label -> [(step, value, ci_low, ci_high)], drawn as markers with error bars (e.g. val
    pass@1 of each checkpoint); ``hline``: (label, y) drawn dashed (e.g. the KL target).
    """

    name: str
    title: str
    keys: tuple[str, ...]
    meaning: str
    ylabel: str = ""
    points: dict[str, list[tuple[float, float, float, float]]] = field(default_factory=dict)
    hline: tuple[str, float] | None = None


def metric_series(history: Sequence[LogRow]) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(step, value)] for every numeric metric logged more than zero times."""
    series: dict[str, list[tuple[int, float]]] = {}
    for row in history:
        for key, value in row.items():
            if key in _SKIP or isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                continue
            series.setdefault(key, []).append((int(row.get("step", 0)), float(value)))
    return series


def _groups(series: dict[str, list[tuple[int, float]]]) -> dict[str, list[str]]:
    """Plot name -> metrics drawn on it (``loss`` with ``eval_loss``, others alone)."""
    groups: dict[str, list[str]] = {}
    for key in sorted(series):
        base = key.removeprefix("eval_")
        groups.setdefault(base, []).append(key)
    return groups


def _save(plt: ModuleType, fig: Figure, path: Path) -> Path:
    from matplotlib.ticker import MaxNLocator  # optional: matplotlib (pdbgym[report])

    for ax in fig.axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_metrics(history: Sequence[LogRow], out_dir: Path, skip: Sequence[str] = ()) -> dict[str, Path]:
    """One PNG per metric group, named ``train_<group>.png`` (metrics in ``skip`` left out)."""
    plt = pyplot()
    series = {k: v for k, v in metric_series(history).items() if k not in set(skip)}
    figures: dict[str, Path] = {}
    for group, keys in _groups(series).items():
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for key in keys:
            steps, values = zip(*series[key], strict=True)
            ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=key)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(group)
        ax.set_title(group)
        if len(keys) > 1:
            ax.legend()
        figures[group] = _save(plt, fig, out_dir / f"train_{group.replace('/', '_')}.png")
    return figures


def plot_panels(history: Sequence[LogRow], panels: Sequence[Panel], out_dir: Path) -> dict[str, Path]:
    """One PNG per panel, ``plot_<name>.png``, drawn even when none of its metrics was logged (it says so)."""
    plt = pyplot()
    series = metric_series(history)
    figures: dict[str, Path] = {}
    for panel in panels:
        fig, ax = plt.subplots(figsize=(6, 3.4))
        drawn = 0
        for key in panel.keys:
            if key in series:
                steps, values = zip(*series[key], strict=True)
                ax.plot(steps, values, marker="o" if len(steps) < 30 else None, markersize=3, label=key)
                drawn += 1
        for label, marks in panel.points.items():
            if marks:
                xs, ys, lows, highs = zip(*marks, strict=True)
                errors = [[max(0.0, y - lo) for y, lo in zip(ys, lows, strict=True)],
                          [max(0.0, hi - y) for y, hi in zip(ys, highs, strict=True)]]
                ax.errorbar(xs, ys, yerr=errors, fmt="s", capsize=3, label=label)
                drawn += 1
        if panel.hline is not None:
            ax.axhline(panel.hline[1], linestyle="--", color="grey", label=panel.hline[0])
        if not drawn:
            ax.text(0.5, 0.5, "not logged by this run", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(panel.ylabel or panel.name)
        ax.set_title(panel.title)
        if drawn > 1 or (drawn and panel.hline is not None):
            ax.legend(fontsize="small")
        figures[panel.name] = _save(plt, fig, out_dir / f"plot_{panel.name}.png")
    return figures


def _plain(value: object) -> object:
    """JSON form of a cell, a row or a table: a link becomes {text, href}."""
    if isinstance(value, Link):
        return {"text": value.text, "href": value.href}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def report_page(title: str, summary: Summary, tables: Tables, figures: dict[str, Path], panels: Sequence[Panel] = (),
                notes: dict[str, list[str]] | None = None) -> Page:
    """The summary, the panels with their meanings, the tables, the other metrics' plots, the notes."""
    named = {p.name for p in panels}
    page = Page(title, [Table(None, [[k, v] for k, v in summary.items()], row_headers=True)])
    if panels:
        page.blocks += [Heading("Over steps"), Figures([Figure(figures[p.name], p.name, p.title, p.meaning, f"plot-{p.name}")
                                                        for p in panels])]
    for heading, rows in tables.items():
        if rows:
            keys = list(rows[0])
            page.blocks += [Heading(heading), Table(keys, [[row.get(k) for k in keys] for row in rows])]
    rest = [Figure(path, name) for name, path in figures.items() if name not in named]
    if rest:
        page.blocks += [Heading("Other logged metrics" if panels else "Metrics per step"), Figures(rest)]
    page.blocks += [block for heading, items in (notes or {}).items() for block in (Heading(heading), Bullets(items))]
    return page


def write_training_report(out_dir: Path, title: str, history: Sequence[LogRow], summary: Summary,
                          tables: Tables | None = None, *,
                          panels: Sequence[Panel] = (), notes: dict[str, list[str]] | None = None) -> Path:
    """Write ``training_report.{html,md,json}`` and the plots into ``out_dir``; return the HTML path.

    The JSON holds ``plots`` (name -> PNG file name, every one written), the summary, tables (links as
    ``{text, href}``), notes and the history.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = tables or {}
    figures = plot_panels(history, panels, out_dir) if panels else {}
    figures.update(plot_metrics(history, out_dir, skip=[k for p in panels for k in p.keys]))
    _, page = report_page(title, summary, tables, figures, panels, notes).write(out_dir, REPORT_NAME)
    write_json_atomic(out_dir / f"{REPORT_NAME}.json", {
        "title": title, "summary": _plain(summary), "plots": {name: path.name for name, path in figures.items()},
        "panels": [{"name": p.name, "title": p.title, "keys": list(p.keys), "meaning": p.meaning} for p in panels],
        "tables": _plain(tables),
        "notes": notes or {}, "history": list(history)}, indent=1)
    return page
