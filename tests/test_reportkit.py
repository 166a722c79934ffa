"""The report base: exact strings of the house style, tables that keep their columns, escaping of hostile
names, embedded plots that are the files' bytes, and the campaign report written through it."""

from __future__ import annotations

import ast
import base64
import math
import re
import sys
import tomllib
from pathlib import Path

import pytest

from pdbgym.errors import PdbgymError
from pdbgym.reportkit import (
    DIFF,
    PCT_DIFF,
    Html,
    Link,
    bounds,
    cell,
    correlation,
    fmt,
    html_list,
    html_table,
    img,
    interval,
    md_table,
    page,
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


def test_html_table_escapes_every_string_but_marked_html():
    table = html_table(["task", HOSTILE], [[HOSTILE, Link(HOSTILE, 'a"b.json', "ok")], [Html("<b>bold</b>"), None]],
                       id='x" onload="y')
    assert "<script>" not in table and "onload=\"y" not in table
    assert table == (
        '<table id="x&quot; onload=&quot;y"><tr><th>task</th><th>&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</th>'
        "</tr><tr><td>&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</td><td><a class=\"ok\" href=\"a&quot;b.json\">"
        "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</a></td></tr><tr><td><b>bold</b></td><td>-</td></tr></table>")


def test_html_table_without_head_and_with_row_headers():
    assert html_table(None, [["k<", 1.0]], row_headers=True) == "<table><tr><th>k&lt;</th><td>1</td></tr></table>"


def test_html_list_escapes_plain_items_only():
    assert html_list([HOSTILE, Html("<a href='r.html'>r</a>")]) == (
        "<ul><li>&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;</li><li><a href='r.html'>r</a></li></ul>")


def test_page_escapes_the_title_and_holds_the_house_style():
    text = page(HOSTILE, "<p>body</p>", "img{max-width:1em}")
    assert text.startswith("<!doctype html>") and text.endswith("</body></html>\n")
    assert "<script>" not in text and text.count("&lt;script&gt;") == 2  # <title> and <h1>
    assert "<p>body</p>" in text and "border-collapse:collapse" in text and "img{max-width:1em}" in text


def test_an_embedded_image_is_the_files_bytes(tmp_path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.plot([0, 1], [0, 1])
    fig.savefig(tmp_path / "curve.png", dpi=20)
    plt.close(fig)
    tag = img(tmp_path / "curve.png")
    data = re.fullmatch(r'<img alt="curve" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', tag).group(1)
    assert base64.b64decode(data) == (tmp_path / "curve.png").read_bytes()
    hostile = img(tmp_path / "curve.png", alt=HOSTILE, id="plot-1")
    assert hostile.startswith('<img id="plot-1" alt="&lt;script&gt;') and "<script>" not in hostile
    assert isinstance(tag, Html)  # a table cell or list item keeps it as markup


def test_a_campaign_report_escapes_a_hostile_task_id_and_keeps_its_markdown_columns(tmp_path):
    from pdbgym.evaluate.analysis import summarize
    from pdbgym.evaluate.report import html_report, markdown_report
    from pdbgym.evaluate.results import EpisodeRow

    ids = ["plain", HOSTILE, "pipe|task"]
    rows = [EpisodeRow(arm, task, run, ok, "solved" if ok else "other", 1, 0.1, f"t/{arm}/{i}/{run}.json")
            for arm in ("a", "b") for i, task in enumerate(ids) for run in range(2)
            for ok in [(i + run) % 2 == 0 if arm == "a" else i == 0]]
    summary = summarize(rows, {"a": "scripted", "b": "embedded"}, ids, 2)
    png = tmp_path / "f.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n")
    text = html_report(summary, rows, HOSTILE, {"pass_at_k": png, "outcomes": png, "heatmap": png})
    assert "<script>" not in text and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in text
    assert '<a class="ok" href="t/a/0/0.json">✓</a>' in text and '<a href="#arm-a">a</a>' in text
    assert "<td>50.0 [" in text  # pass@1 of arm a in percent points
    markdown = markdown_report(summary, rows, "t")
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
