"""A report page's HTML against its Markdown: the text of every table row of both, so a test can check that the
page holds every cell the Markdown has (``reportkit.Page`` writes both from one structure)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

_VOID = ("meta", "br", "img")
_INLINE = re.compile(r"\[([^\]]+)\]\([^)\s]+\)|`([^`]+)`|\*\*(.+?)\*\*")


class _Rows(HTMLParser):
    """Tag counts, and the text of each table row's cells; fails on a closing tag that closes nothing open."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.rows: list[list[str]] = []
        self.tags: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in _VOID:
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


def parse(page: str) -> _Rows:
    """The page parsed: every tag closed, each table row's cell texts in ``rows``."""
    tree = _Rows()
    tree.feed(page)
    tree.close()
    assert tree.open == [], tree.open
    return tree


def table_rows(page: str) -> list[list[str]]:
    """The text of every table row of an HTML page, cell by cell, spaces collapsed."""
    return [[" ".join(cell.split()) for cell in row] for row in parse(page).rows]


def _shown(cell: str) -> str:
    """What a Markdown cell shows: its pipes unescaped, links' text, code and bold without their marks."""
    text = _INLINE.sub(lambda m: next(g for g in m.groups() if g is not None), cell.replace("\\|", "|"))
    return " ".join(text.split())


def markdown_rows(markdown: str) -> list[list[str]]:
    """The shown text of every Markdown table row's cells (rule lines and all-empty head rows left out)."""
    rows = []
    for line in markdown.splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [_shown(c) for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if any(cells):
            rows.append(cells)
    return rows


def assert_html_holds_markdown_tables(markdown: str, page: str) -> None:
    """Every Markdown table row is an HTML table row with the same cells, in the same order."""
    assert markdown_rows(markdown) == table_rows(page)
    assert parse(page).tags.get("table", 0) == sum(line.startswith("|---") for line in markdown.splitlines())
