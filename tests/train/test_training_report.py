"""The training report (SFT, DAgger, GRPO) written from one page: report.md and report.html hold the same
tables, headings, figures and notes; names with ``<``, ``&`` and ``|`` keep their columns and are escaped."""

from __future__ import annotations

from html import escape

from htmlrows import assert_html_holds_markdown_tables, table_rows

from pdbgym.reportkit import Link
from pdbgym.train.report import Panel, write_training_report


def test_the_training_report_writes_the_same_page_as_markdown_and_html(tmp_path):
    history = [{"step": 1, "loss": 2.0, "eval_loss": 2.5, "reward": 0.1, "kl": 0.01},
               {"step": 2, "loss": 1.5, "eval_loss": 2.2, "reward": 0.3, "kl": 0.02}]
    summary = {"base": "tiny<model>", "steps": 2, "adapter": Link("adapter/", "adapter")}
    tables = {"Val gate": [{"checkpoint": "ck-1", "task": "a|b & <c>", "pass@1": 0.5}], "Empty": []}
    panels = [Panel("reward", "Reward & terms", ("reward",), "Mean reward of a step's <episodes>.")]
    page = write_training_report(tmp_path, "pdbgym <GRPO>", history, summary, tables, panels=panels,
                                 notes={"How to read": ["a `code` note", "**bold** & plain"]})
    markdown, html = (tmp_path / "training_report.md").read_text(), page.read_text()
    lines = markdown.splitlines()
    assert lines[:7] == ["# pdbgym <GRPO>", "", "| | |", "|---|---|", "| base | tiny<model> |", "| steps | 2 |",
                         "| adapter | [adapter/](adapter) |"]
    assert "| ck-1 | a\\|b & <c> | 0.5 |" in lines and "## Empty" not in lines
    assert "### Reward & terms\n\n![reward](plot_reward.png)\n\nMean reward of a step's <episodes>.\n\n## Val gate" in markdown
    assert "## Other logged metrics\n\n![loss](train_loss.png)\n![kl](train_kl.png)\n\n## How to read" in markdown
    assert markdown.endswith("- a `code` note\n- **bold** & plain\n")
    assert_html_holds_markdown_tables(markdown, html)
    assert ["ck-1", "a|b & <c>", "0.5"] in table_rows(html) and "<th>base</th><td>tiny&lt;model&gt;</td>" in html
    assert "<h1>pdbgym &lt;GRPO&gt;</h1>" in html and "<model>" not in html and "<c>" not in html
    for line in lines:
        if line.startswith("## "):
            assert f"<h2>{escape(line[3:])}</h2>" in html, line
    assert '<figure id="plot-reward">' in html and "<b>Reward &amp; terms</b>: Mean reward of a step&#x27;s" in html
    assert html.count("<img") == 3 and "<li>a <code>code</code> note</li><li><strong>bold</strong> &amp; plain</li>" in html
