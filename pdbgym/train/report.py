"""Training reports (SFT, DAgger, GRPO): Markdown, a self-contained HTML page and PNG plots.

Input is what a run logged: ``history`` (one dict per logged step: ``step`` plus numeric metrics such as
``loss``, ``eval_loss``, ``learning_rate``, ``reward``, ``kl``, ``beta``), a ``summary`` (name -> value)
and optional ``tables`` (title -> rows of equal keys, e.g. one row per DAgger iteration, each row able to
carry a ``checkpoint`` and a ``transcripts`` link). Each metric gets one plot against the step; a
metric and its ``eval_`` twin share a plot.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pdbgym.fileio import write_json_atomic, write_text_atomic

REPORT_NAME = "training_report"
_SKIP = {"step", "epoch", "total_flos", "train_runtime", "train_samples_per_second", "train_steps_per_second",
         "eval_runtime", "eval_samples_per_second", "eval_steps_per_second"}


def metric_series(history: Sequence[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """metric -> [(step, value)] for every numeric metric logged more than zero times."""
    series: dict[str, list[tuple[int, float]]] = {}
    for row in history:
        for key, value in row.items():
            if key in _SKIP or isinstance(value, bool) or not isinstance(value, int | float):
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


def plot_metrics(history: Sequence[dict[str, Any]], out_dir: Path) -> dict[str, Path]:
    """One PNG per metric group, named ``train_<group>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = metric_series(history)
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
        fig.tight_layout()
        path = out_dir / f"train_{group.replace('/', '_')}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        figures[group] = path
    return figures


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.5g}"
    return "-" if value is None else str(value)


def markdown_report(title: str, summary: dict[str, Any], tables: dict[str, list[dict[str, Any]]],
                    figures: dict[str, Path]) -> str:
    lines = [f"# {title}", "", "| | |", "|---|---|"]
    lines += [f"| {key} | {_cell(value)} |" for key, value in summary.items()]
    for heading, rows in tables.items():
        if not rows:
            continue
        keys = list(rows[0])
        lines += ["", f"## {heading}", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        lines += ["| " + " | ".join(_cell(row.get(k)) for k in keys) + " |" for row in rows]
    lines += ["", "## Metrics per step", ""] + [f"![{name}]({path.name})" for name, path in figures.items()]
    return "\n".join(lines) + "\n"


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def html_report(title: str, summary: dict[str, Any], tables: dict[str, list[dict[str, Any]]],
                figures: dict[str, Path]) -> str:
    esc = html.escape
    head = "".join(f"<tr><th>{esc(str(k))}</th><td>{esc(_cell(v))}</td></tr>" for k, v in summary.items())
    blocks = []
    for heading, rows in tables.items():
        if not rows:
            continue
        keys = list(rows[0])
        body = "".join("<tr>" + "".join(f"<td>{esc(_cell(row.get(k)))}</td>" for k in keys) + "</tr>" for row in rows)
        blocks.append(f"<h2>{esc(heading)}</h2><table><tr>{''.join(f'<th>{esc(k)}</th>' for k in keys)}</tr>{body}</table>")
    plots = "".join(_img(path) for path in figures.values())
    style = ("body{font-family:sans-serif;max-width:70em;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left}img{max-width:32em;margin:.5em}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title><style>{style}</style>"
            f"</head><body><h1>{esc(title)}</h1><table>{head}</table>{''.join(blocks)}"
            f"<h2>Metrics per step</h2>{plots}</body></html>\n")


def write_training_report(out_dir: Path, title: str, history: Sequence[dict[str, Any]], summary: dict[str, Any],
                          tables: dict[str, list[dict[str, Any]]] | None = None) -> Path:
    """Write ``training_report.{html,md,json}`` and the plots into ``out_dir``; return the HTML path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = tables or {}
    figures = plot_metrics(history, out_dir)
    write_text_atomic(out_dir / f"{REPORT_NAME}.md", markdown_report(title, summary, tables, figures))
    write_json_atomic(out_dir / f"{REPORT_NAME}.json", {"title": title, "summary": summary, "tables": tables,
                                                        "history": list(history)}, indent=1)
    page = out_dir / f"{REPORT_NAME}.html"
    write_text_atomic(page, html_report(title, summary, tables, figures))
    return page
