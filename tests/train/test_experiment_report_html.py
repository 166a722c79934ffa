"""The experiment report's HTML page: written beside report.md from the same lines, every table's rows and
the headline in it, text escaped (a task name with ``<`` stays text), inline markup rendered."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from pdbgym.reportkit import md_table
from pdbgym.train.experiment.config import load_experiment
from pdbgym.train.experiment.report import write_experiment_report
from pdbgym.train.experiment.report_html import markdown_page

REPO_FILE = Path(__file__).resolve().parents[2] / "experiments" / "smollm2-ladder.toml"


class _Tree(HTMLParser):
    """Tag counts, and the text of each table row (cells joined by ' | ') of a page; fails on unclosed tags."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.rows: list[list[str]] = []
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in ("meta", "br", "img"):
            self.open.append(tag)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open.pop() == tag, f"</{tag}> closes {self.open[-1:]}"

    def handle_data(self, data: str) -> None:
        if "td" in self.open or "th" in self.open:
            self.rows[-1][-1] += data


def _parse(text: str) -> _Tree:
    tree = _Tree()
    tree.feed(text)
    tree.close()
    assert tree.open == [], tree.open
    return tree


def test_the_converter_renders_the_reports_markdown_and_escapes_text():
    lines = ["# Experiment x<y", "", "**Smoke test:** see `OUT/report.md` and [the run](run/)", "",
             "## Tasks", "", *md_table(["task", "solved"], [["t<1|2>", 1], ["plain & simple", 0]]), "",
             "- one <b>", "- two", ""]
    text = markdown_page(lines)
    tree = _parse(text)
    assert "<title>Experiment x&lt;y</title>" in text and "<h1>Experiment x&lt;y</h1>" in text
    assert "<strong>Smoke test:</strong>" in text and "<code>OUT/report.md</code>" in text
    assert '<a href="run/">the run</a>' in text and "<h2>Tasks</h2>" in text
    assert tree.rows == [["task", "solved"], ["t<1|2>", "1"], ["plain & simple", "0"]]  # the pipe unescaped
    assert "t&lt;1|2&gt;" in text and "<b>" not in text and "<li>one &lt;b&gt;</li><li>two</li>" in text


def test_the_experiment_report_writes_an_html_page_with_every_table_row(tmp_path):
    config, out = load_experiment(REPO_FILE, quick=True), tmp_path / "run"
    (out / "grpo").mkdir(parents=True)
    (out / "grpo" / "steps.jsonl").write_text(json.dumps({"step": 1, "reward": 0.1, "episodes/solve_rate": 0.25}) + "\n")
    state = {"stages": {"split": {"seconds": 1.0, "train": 3}, "grpo": {"seconds": 2.0, "tasks": ["fix<lt>-1"]}}}
    path = write_experiment_report(config, out, state)
    markdown, page = path.read_text(), (out / "report.html").read_text()
    tree = _parse(page)
    headline = markdown.splitlines()[0].removeprefix("# ")
    assert f"<h1>{headline}</h1>" in page and "<strong>Smoke test (quick profile):</strong>" in page
    md_rows = [line for line in markdown.splitlines() if line.startswith("|") and not line.startswith("|---")]
    assert tree.tags["table"] == sum(line.startswith("|---") for line in markdown.splitlines())
    assert tree.rows == [[c.strip() for c in row.split("|")[1:-1]] for row in md_rows]  # no cell holds a pipe here
    assert ["grpo", "2", "tasks: fix<lt>-1"] in tree.rows and "fix&lt;lt&gt;-1" in page and "<lt>" not in page
    assert ["1", "0.100", "25.0%"] == next(row[:3] for row in tree.rows if row[0] == "1")
    for heading in ("GRPO steps", "Val gates (checkpoint choice)", "Held-out test split", "Stop at peak"):
        assert f"<h2>{heading}</h2>" in page
