"""The experiment report's HTML page: written beside report.md from the same page, every table's rows and
the headline in it, text escaped (a task name with ``<`` stays text), inline markup rendered."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from htmlrows import assert_html_holds_markdown_tables, parse, table_rows

from pdbgym.train.experiment.config import load_experiment
from pdbgym.train.experiment.report import write_experiment_report

REPO_FILE = Path(__file__).resolve().parents[2] / "experiments" / "smollm2-ladder.toml"


def test_the_experiment_report_writes_an_html_page_with_every_table_row(tmp_path):
    config, out = load_experiment(REPO_FILE, quick=True), tmp_path / "run"
    (out / "grpo").mkdir(parents=True)
    (out / "grpo" / "steps.jsonl").write_text(json.dumps({"step": 1, "reward": 0.1, "episodes/solve_rate": 0.25}) + "\n")
    state = {"stages": {"split": {"seconds": 1.0, "train": 3}, "grpo": {"seconds": 2.0, "tasks": ["fix<lt>-1|x"]}}}
    path = write_experiment_report(config, out, state)
    markdown, page = path.read_text(), (out / "report.html").read_text()
    parse(page)  # every tag closed
    rows = table_rows(page)
    headline = markdown.splitlines()[0].removeprefix("# ")
    assert f"<h1>{headline}</h1>" in page and "<strong>Smoke test (quick profile):</strong>" in page
    assert_html_holds_markdown_tables(markdown, page)
    assert "| grpo | 2 | tasks: fix<lt>-1\\|x |" in markdown  # the pipe escaped in Markdown only
    assert ["grpo", "2", "tasks: fix<lt>-1|x"] in rows and "fix&lt;lt&gt;-1|x" in page and "<lt>" not in page
    assert ["1", "0.100", "25.0%"] == next(row[:3] for row in rows if row[0] == "1")
    for line in markdown.splitlines():
        if line.startswith("## "):
            assert f"<h2>{escape(line[3:])}</h2>" in page, line
    for heading in ("GRPO steps", "Val gates (checkpoint choice)", "Held-out test split", "Stop at peak"):
        assert f"<h2>{heading}</h2>" in page
    assert "<code>" in page and "`" not in page.split("<body>", 1)[1]  # code spans rendered, none left raw
