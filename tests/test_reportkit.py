"""The report base: exact strings of the house style, tables that keep their columns, one page written as
Markdown and HTML (hostile names escaped, every table cell in both), embedded plots that are the files' bytes,
and the campaign report written through it."""

from __future__ import annotations

import ast
import base64
import math
import re
import sys
import tomllib
from pathlib import Path

import pytest
from htmlrows import assert_html_holds_markdown_tables, table_rows

from pdbgym.errors import PdbgymError
from pdbgym.reportkit import (
    DIFF,
    PCT_DIFF,
    Bullets,
    Figure,
    Figures,
    Heading,
    Link,
    Page,
    Paragraph,
    Preformatted,
    Table,
    bounds,
    cell,
    correlation,
    fmt,
    inline_html,
    interval,
    md_table,
    pct,
    pct_interval,
    pyplot,
)

HOSTILE = "<script>alert('x')</script>"


@pytest.mark.parametrize("share,digits,text", [
    (0.1234, 1, "12.3%"), (1 / 3, 1, "33.3%"), (2 / 3, 1, "66.7%"), (0.0, 1, "0.0%"), (1.0, 1, "100.0%"),
    (0.01234, 2, "1.23%"), (0.00049, 1, "0.0%"), (None, 1, "n/a"), (math.nan, 1, "n/a"),
])
def test_a_share_is_a_percent_with_its_sign(share, digits, text):
    assert pct(share, digits) == text


def test_a_share_with_its_interval_is_in_percent_points():
    assert pct_interval({"mean": 0.5, "ci": [0.25, 0.75]}) == "50.0 [25.0, 75.0]"
    assert pct_interval({"mean": 2 / 3, "ci": [1 / 3, 1.0]}) == "66.7 [33.3, 100.0]"
    assert pct_interval({"mean": 0.0, "ci": [0.0, 0.1611]}) == "0.0 [0.0, 16.1]"
    assert pct_interval({"mean": 0.5}) == "50.0"  # no interval recorded: the estimate alone
    assert pct_interval({"mean": None, "ci": [0.1, 0.2]}) == "n/a"


def test_intervals_bounds_differences_and_correlations():
    assert interval(0.123456, 0.1, 0.2) == "0.1235 [0.1000, 0.2000]"
    assert interval(1.5, None, None) == "1.5000"
    assert interval(None, 0.0, 1.0) == "n/a"
    assert interval(math.nan, 0.0, 1.0, missing="-") == "-"
    assert interval(-0.01, -0.02, 0.001, DIFF) == "-0.0100 [-0.0200, +0.0010]"
    assert bounds(-0.5, 0.26, PCT_DIFF) == "[-0.5, +0.3]"
    assert bounds(16.66, 50.0, PCT_DIFF) == "[+16.7, +50.0]"
    assert bounds(None, 1.0) == "n/a" and bounds(0.0, None, missing="-") == "-"
    assert fmt(0.5, DIFF) == "+0.5000" and fmt(-0.5, DIFF) == "-0.5000" and fmt(None) == "n/a"
    assert correlation(0.5) == "0.50" and correlation(-0.126) == "-0.13"
    assert correlation(math.nan) == "n/a" and correlation(None) == "n/a"


def test_a_plain_cell():
    assert cell(0.123456789) == "0.12346" and cell(1234567.0) == "1.2346e+06"
    assert cell(None) == "-" and cell(3) == "3" and cell(True) == "True" and cell("x") == "x"


def test_markdown_table_exact_and_keeps_its_columns():
    lines = md_table(["arm", "KL(T||S)"], [["a|b", 0.5], ["x\ny", None], [Link("t|1", "runs/t|1.json"), ""],
                                           ["links", [Link("✓", "a.json"), Link("✗", "b.json")]]])
    assert lines == [
        "| arm | KL(T\\|\\|S) |",
        "|---|---|",
        "| a\\|b | 0.5 |",
        "| x y | - |",
        "| [t\\|1](runs/t\\|1.json) | |",
        "| links | [✓](a.json) [✗](b.json) |",
    ]
    for line in lines:  # every row has as many unescaped pipes as the head
        assert len(re.findall(r"(?<!\\)\|", line)) == 3


def test_a_page_table_with_markup_characters_in_both_renderings():
    """``<``, ``&`` and ``|`` in a table: Markdown escapes the pipe and keeps the columns, HTML escapes ``<`` and
    ``&`` and shows the pipe as it is."""
    page = Page("cells", [Table(["name", "a|b"], [["x<y & z", "p|q"], [HOSTILE, 1.5]])])
    assert page.to_markdown() == ("# cells\n\n| name | a\\|b |\n|---|---|\n| x<y & z | p\\|q |\n"
                                  f"| {HOSTILE} | 1.5 |\n")
    text = page.to_html()
    assert "<table><tr><th>name</th><th>a|b</th></tr><tr><td>x&lt;y &amp; z</td><td>p|q</td></tr>" in text
    assert "<script>" not in text and "<td>&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</td>" in text
    assert table_rows(text) == [["name", "a|b"], ["x<y & z", "p|q"], [HOSTILE, "1.5"]]
    assert_html_holds_markdown_tables(page.to_markdown(), text)


def test_a_page_writes_every_block_in_both_files(tmp_path):
    png = tmp_path / "curve.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    page = Page("T <1>", [
        Paragraph("**Note:** see `a<b` and [the run](run/)", "warn"), Heading("Part & whole"),
        Bullets(["one <b>", "two"]), Table(None, [["k<", 1.0]], row_headers=True),
        Table(["task", "runs"], [[HOSTILE, [Link("✓", 'a"b.json', "ok"), Link("✗", "c.json")]]], anchors=["arm-a"]),
        Preformatted("x = `1` < 2\n```"), Heading("Plots", 3), Figures([Figure(png, "pass@k"), Figure(png)]),
        Figure(png, "loss", "Loss & more", "what it <means>", "plot-loss")])
    md_path, html_path = page.write(tmp_path, "report")
    assert md_path.read_text() == "\n".join([
        "# T <1>", "", "**Note:** see `a<b` and [the run](run/)", "", "## Part & whole", "", "- one <b>", "- two", "",
        "| | |", "|---|---|", "| k< | 1 |", "", "| task | runs |", "|---|---|",
        f"| {HOSTILE} | [✓](a\"b.json) [✗](c.json) |", "", "````", "x = `1` < 2", "```", "````", "", "### Plots", "",
        "![pass@k](curve.png)", "![curve](curve.png)", "", "### Loss & more", "", "![loss](curve.png)", "",
        "what it <means>", ""])
    text = html_path.read_text()
    assert text.startswith("<!doctype html>") and text.endswith("</body></html>\n") and "border-collapse" in text
    assert "<title>T &lt;1&gt;</title>" in text and "<h1>T &lt;1&gt;</h1>" in text and "<script>" not in text
    assert ('<p class="warn"><strong>Note:</strong> see <code>a&lt;b</code> and <a href="run/">the run</a></p>'
            in text)
    assert "<h2>Part &amp; whole</h2><ul><li>one &lt;b&gt;</li><li>two</li></ul>" in text.replace("\n", "")
    assert "<table><tr><th>k&lt;</th><td>1</td></tr></table>" in text  # no head row in HTML
    assert ('<span id="arm-a"></span><table><tr><th>task</th><th>runs</th></tr><tr><td>&lt;script&gt;'
            "alert(&#x27;x&#x27;)&lt;/script&gt;</td><td><a class=\"ok\" href=\"a&quot;b.json\">✓</a> "
            '<a href="c.json">✗</a></td></tr></table>') in text
    assert "<pre>x = `1` &lt; 2\n```</pre>" in text and "<h3>Plots</h3>" in text
    assert text.count('src="data:image/png;base64,') == 3 and '<div class="figures"><img alt="pass@k"' in text
    assert ('<figure id="plot-loss"><img alt="loss" src="data:image/png;base64,iVBORw0KGgo="><figcaption><b>Loss '
            "&amp; more</b>: what it &lt;means&gt;</figcaption></figure>") in text
    assert_html_holds_markdown_tables(md_path.read_text(), text)


def test_text_renders_only_code_bold_and_safe_links_as_markup():
    assert inline_html("a `**x**` **b `c`** [d](e.json) [f](#g)") == (
        'a <code>**x**</code> <strong>b <code>c</code></strong> <a href="e.json">d</a> <a href="#g">f</a>')
    assert inline_html("[x](javascript:alert(1)) [y](https://h/z) <i>") == (
        '[x](javascript:alert(1)) <a href="https://h/z">y</a> &lt;i&gt;')
    assert Table(None, [], anchors=['x" onload="y']).html() == '<span id="x&quot; onload=&quot;y"></span><table></table>'


def test_an_embedded_image_is_the_files_bytes(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [0, 1])
    fig.savefig(tmp_path / "curve.png", dpi=20)
    plt.close(fig)
    tag = Figure(tmp_path / "curve.png").html()
    data = re.fullmatch(r'<img alt="curve" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', tag).group(1)
    assert base64.b64decode(data) == (tmp_path / "curve.png").read_bytes()
    hostile = Figure(tmp_path / "curve.png", alt=HOSTILE, id="plot-1").html()
    assert hostile.startswith('<img id="plot-1" alt="&lt;script&gt;') and "<script>" not in hostile


def test_a_campaign_report_escapes_a_hostile_task_id_and_keeps_its_markdown_columns(tmp_path):
    from pdbgym.evaluate.analysis import summarize
    from pdbgym.evaluate.report import report_page
    from pdbgym.evaluate.results import EpisodeRow

    ids = ["plain", HOSTILE, "pipe|task"]
    rows = [EpisodeRow(arm, task, run, ok, "solved" if ok else "other", 1, 0.1, f"t/{arm}/{i}/{run}.json")
            for arm in ("a", "b") for i, task in enumerate(ids) for run in range(2)
            for ok in [(i + run) % 2 == 0 if arm == "a" else i == 0]]
    summary = summarize(rows, {"a": "scripted", "b": "embedded"}, ids, 2)
    png = tmp_path / "f.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    page = report_page(summary, rows, HOSTILE, {"pass_at_k": png, "outcomes": png, "heatmap": png})
    text = page.to_html()
    assert "<script>" not in text and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
    assert '<a class="ok" href="t/a/0/0.json">✓</a>' in text and '<a href="#arm-a">a</a>' in text
    assert "<td>50.0 [" in text  # pass@1 of arm a in percent points
    markdown = page.to_markdown()
    assert_html_holds_markdown_tables(markdown, text)
    row = next(line for line in markdown.splitlines() if line.startswith("| pipe"))
    assert row.startswith("| pipe\\|task | [✓](t/a/2/0.json) [✗](t/a/2/1.json) |")
    assert len(re.findall(r"(?<!\\)\|", row)) == 4  # task, a, b: the escaped pipe is not a column


REPORTS = ("train/report.py", "train/grpo/report.py", "train/experiment/report.py", "evaluate/report.py",
           "evaluate/report_sections.py", "divergence/render.py")


@pytest.mark.parametrize("module", REPORTS)
def test_reports_embed_and_escape_only_through_the_kit(module):
    """No report imports ``html`` or ``base64`` or sets up matplotlib itself: the kit owns those."""
    tree = ast.parse((Path(__file__).resolve().parents[1] / "pdbgym" / module).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"html", "base64", "matplotlib"}, sorted(imported & {"html", "base64", "matplotlib"})


def test_figures_without_matplotlib_name_the_extra_to_install(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what a missing package looks like to import
    with pytest.raises(PdbgymError, match=re.escape("pip install 'pdbgym[report]'")):
        pyplot()


def test_the_training_extra_brings_matplotlib_as_every_training_command_writes_a_report() -> None:
    extras = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    extras = extras["project"]["optional-dependencies"]
    assert "report" in re.search(r"pdbgym\[([^\]]*)\]", " ".join(extras["train"])).group(1).split(",")
    assert any(spec.startswith("matplotlib") for spec in extras["report"])
