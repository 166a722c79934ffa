"""The experiment report's HTML page (``OUT/report.html``), from the very Markdown lines of ``report.md``.

The report writes only this subset of Markdown, and the page renders exactly it: a ``# `` title (the
page's ``<h1>``), ``## ``/``### `` headings, pipe tables as ``reportkit.md_table`` writes them (a ``\\|``
inside a cell is a pipe), ``- `` bullet lists, and paragraphs; inline ``**bold**``, ```code``` and
``[text](href)``. Every piece of text is escaped first (``reportkit.escape``), so a task name holding
``<`` shows as text; the inline markup is recognized in the escaped text only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pdbgym.reportkit import escape, page

_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_INLINE = [(re.compile(r"`([^`]+)`"), r"<code>\1</code>"), (re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"),
           (re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)"), r'<a href="\2">\1</a>')]


def inline(text: str) -> str:
    """One line of Markdown text as HTML: escaped, then code spans, bold and links."""
    out = escape(text)
    for pattern, markup in _INLINE:
        out = pattern.sub(markup, out)
    return out


def _cells(row: str) -> list[str]:
    return [inline(c.strip().replace("\\|", "|")) for c in _CELL_SPLIT.split(row.strip())[1:-1]]


def _table(rows: list[str]) -> str:
    head, body = _cells(rows[0]), [_cells(r) for r in rows[2:]]  # rows[1] is the |---| rule
    return ("<table><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in body) + "</table>")


def markdown_page(lines: Sequence[str], fallback_title: str = "Experiment") -> str:
    """The report's Markdown ``lines`` as a self-contained page (``reportkit.page``)."""
    title, blocks, i = fallback_title, [], 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        start = i
        if line.startswith("|"):
            while i < len(lines) and lines[i].startswith("|"):
                i += 1
            blocks.append(_table(list(lines[start:i])))
        elif line.startswith("- "):
            while i < len(lines) and lines[i].startswith("- "):
                i += 1
            blocks.append("<ul>" + "".join(f"<li>{inline(item[2:])}</li>" for item in lines[start:i]) + "</ul>")
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            if level == 1 and start == 0:
                title = line[1:].strip()
            else:
                blocks.append(f"<h{level}>{inline(line[level:].strip())}</h{level}>")
            i += 1
        else:
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("|", "- ", "#")):
                i += 1
            blocks.append("<p>" + " ".join(inline(t) for t in lines[start:i]) + "</p>")
    return page(title, "\n".join(blocks))
