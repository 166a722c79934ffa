"""The pieces every report is built from: number formats, tables, embedded plots, and the :class:`Page`.

A report is built once as a :class:`Page` of typed blocks (:class:`Heading`, :class:`Paragraph`,
:class:`Bullets`, :class:`Table`, :class:`Preformatted`, :class:`Figure`, :class:`Figures`) and written from
it as Markdown and as a self-contained HTML page (``Page.write``): no report has a Markdown path and an HTML
path of its own. The training reports (``train/report.py``, GRPO's and the experiment's), the campaign report
(``evaluate/report.py`` and its sections) and the divergence tables (``divergence/render.py``) all write
through these, so one house style holds everywhere:

- A share on its own is a percent with one decimal and its sign: ``pct(0.1234) == "12.3%"``.
- An estimate with its interval is ``value [low, high]``. A share's interval is in percent points with no
  ``%`` sign, the unit said once in the column header or the sentence above it ("pass@1 % [95% CI]"):
  ``pct_interval({"mean": 0.5, "ci": [0.25, 0.75]}) == "50.0 [25.0, 75.0]"``.
- Nats (KL, JSD) carry four decimals (``NATS``); a difference always carries its sign (``DIFF``,
  ``PCT_DIFF``); a correlation two decimals (``CORR``).
- A number that does not exist (undefined, not computed, not available) is ``n/a`` (``NA``); a table cell
  with nothing in it (a metric a step did not log) is ``-`` (``EMPTY``).
- Text is inline Markdown of three forms (```code```, ``**bold**``, ``[text](href)``, :data:`Text`). HTML:
  every string is escaped and only those forms become markup (a link only to a relative path, an anchor or
  http(s)). Markdown: a cell's pipes are escaped (``\\|``) and its newlines become spaces, so a table keeps
  its columns.
- Plots are PNG files drawn by matplotlib's Agg backend (:func:`pyplot`); the HTML page embeds them as
  base64 (:class:`Figure`) so it stands alone, the Markdown links the files beside it.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TypedDict

from pdbgym.errors import PdbgymError
from pdbgym.fileio import write_text_atomic
from pdbgym.versions import import_optional

NA = "n/a"
EMPTY = "-"
NATS = ".4f"
DIFF = "+.4f"
PCT_POINTS = ".1f"
PCT_DIFF = "+.1f"
CORR = ".2f"


@dataclass(frozen=True)
class Link:
    """A table cell that links to a file, folder or anchor, ``href`` relative to the report's folder."""

    text: str
    href: str
    css_class: str = ""


Cell = str | int | float | Link | Sequence[Link] | None
"""What a table cell holds: text (:data:`Text`), a number (a float to five significant
digits), a link, several links side by side, or None (``-``)."""


# --- numbers ---------------------------------------------------------------------------------------------

def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def fmt(value: float | None, spec: str = NATS, missing: str = NA) -> str:
    """``value`` in the format ``spec``; ``missing`` for None or NaN."""
    return missing if _missing(value) else format(value, spec)


def pct(share: float | None, digits: int = 1, missing: str = NA) -> str:
    """A share as a percent: ``pct(0.1234) == "12.3%"``, ``pct(0.01234, 2) == "1.23%"``."""
    return missing if _missing(share) else f"{100 * share:.{digits}f}%"


def bounds(low: float | None, high: float | None, spec: str = NATS, missing: str = NA) -> str:
    """An interval alone, ``[low, high]``; ``missing`` when either end is unknown."""
    if _missing(low) or _missing(high):
        return missing
    return f"[{format(low, spec)}, {format(high, spec)}]"


def interval(value: float | None, low: float | None, high: float | None, spec: str = NATS,
             missing: str = NA) -> str:
    """``value [low, high]``; the value alone when the interval is unknown, ``missing`` when the value is."""
    if _missing(value):
        return missing
    ends = bounds(low, high, spec, missing="")
    return f"{format(value, spec)} {ends}" if ends else format(value, spec)


class EstimateDict(TypedDict):
    """An estimate as reports and ``summary.json`` hold it (``evaluate.stats.Estimate.to_dict``): a mean over
    tasks, its clustered standard error, the interval ``[low, high]`` and how it was made."""

    mean: float
    se: float
    ci: list[float]
    n_tasks: int
    ci_method: str
    confidence: float


def pct_interval(estimate: EstimateDict, missing: str = NA) -> str:
    """An estimate of a share (``{"mean", "ci": [low, high]}``) in percent points: ``"50.0 [25.0, 75.0]"``."""
    mean = estimate.get("mean")
    low, high = estimate.get("ci") or (None, None)
    scaled = [None if _missing(v) else 100 * v for v in (mean, low, high)]
    return interval(*scaled, spec=PCT_POINTS, missing=missing)


def correlation(value: float | None, missing: str = NA) -> str:
    """A correlation with two decimals; ``missing`` where it is undefined (a side that does not vary)."""
    return fmt(value, CORR, missing)


def cell(value: Cell) -> str:
    """The text of a plain table cell: a float with five significant digits, ``-`` for None."""
    if isinstance(value, float):
        return f"{value:.5g}"
    return EMPTY if value is None else str(value)


# --- Markdown --------------------------------------------------------------------------------------------

def md_escape(text: str) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, newlines as spaces."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _links(value: Cell) -> bool:
    return isinstance(value, list) and all(isinstance(v, Link) for v in value)


def md_cell(value: Cell) -> str:
    """A Markdown table cell: a :class:`Link` (or a list of them) as links, anything else via :func:`cell`."""
    if isinstance(value, Link):
        return f"[{md_escape(value.text)}]({md_escape(value.href)})"
    if _links(value):
        return " ".join(md_cell(v) for v in value)
    return md_escape(cell(value))


def md_row(cells: Sequence[str]) -> str:
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"


def md_table(head: Sequence[Cell], rows: Sequence[Sequence[Cell]]) -> list[str]:
    """The lines of a Markdown table, every cell through :func:`md_cell`."""
    return ([md_row([md_cell(h) for h in head]), "|" + "---|" * len(head)]
            + [md_row([md_cell(c) for c in row]) for row in rows])


def md_bullets(items: Sequence[str]) -> list[str]:
    return [f"- {item}" for item in items]


# --- the page: one structure, written as Markdown and as HTML ---------------------------------------------

_INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
STYLE = ("body{font-family:sans-serif;max-width:72em;margin:2em auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:1em 0}"
         "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}"
         "a.ok{color:#080}a.bad{color:#b00}img{max-width:100%;margin:.5em 0}.warn{background:#fff3cd;padding:.5em}"
         ".figures{display:flex;flex-wrap:wrap;align-items:flex-start;gap:0 1em}.figures>img{max-width:34em}"
         "figure{width:34em;margin:.5em 0}figure img{max-width:100%}pre{background:#f6f6f6;padding:.5em;overflow-x:auto}")


def escape(value: object) -> str:
    """``value`` as text safe in HTML content and in a quoted attribute."""
    return html.escape(str(value))


def _safe_href(href: str) -> bool:
    """A link a report may hold: relative, an anchor, or http(s) (never ``javascript:`` and the like)."""
    scheme = _SCHEME.match(href)
    return scheme is None or scheme.group(0).lower() in ("http:", "https:")


def inline_html(text: str) -> str:
    """A page's text (:data:`Text`) as HTML: everything escaped, then code spans, bold and links rendered."""
    out, pos = [], 0
    for match in _INLINE.finditer(text):
        code, bold, label, href = match.groups()
        out.append(escape(text[pos:match.start()]))
        if code is not None:
            out.append(f"<code>{escape(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{inline_html(bold)}</strong>")
        elif _safe_href(href):
            out.append(f'<a href="{escape(href)}">{inline_html(label)}</a>')
        else:
            out.append(escape(match.group(0)))
        pos = match.end()
    return "".join(out) + escape(text[pos:])


Text = str
"""The text of a heading, paragraph, list item or table cell: inline Markdown of three forms only, ```code```,
``**bold**`` and ``[text](href)``. Markdown writes it as it is (a table cell's pipes escaped); HTML escapes
it and renders those three forms (:func:`inline_html`), so both files show the same."""


def html_cell(value: Cell) -> str:
    """An HTML table cell's content: text through :func:`inline_html`, links as ``<a>``, numbers formatted."""
    if isinstance(value, Link):
        css = f' class="{escape(value.css_class)}"' if value.css_class else ""
        return f'<a{css} href="{escape(value.href)}">{escape(value.text)}</a>'
    if _links(value):
        return " ".join(html_cell(v) for v in value)
    return inline_html(value) if isinstance(value, str) else escape(cell(value))


@dataclass(frozen=True)
class Heading:
    """A section's heading: ``## text`` (``level`` 2) or ``### text``; ``<h2>``, ``<h3>``."""

    text: Text
    level: int = 2

    def markdown(self) -> str:
        return f"{'#' * self.level} {self.text}"

    def html(self) -> str:
        return f"<h{self.level}>{inline_html(self.text)}</h{self.level}>"


@dataclass(frozen=True)
class Paragraph:
    """A paragraph; ``css_class`` is HTML's only (``warn`` shades it)."""

    text: Text
    css_class: str = ""

    def markdown(self) -> str:
        return self.text

    def html(self) -> str:
        css = f' class="{escape(self.css_class)}"' if self.css_class else ""
        return f"<p{css}>{inline_html(self.text)}</p>"


@dataclass(frozen=True)
class Bullets:
    """A bullet list."""

    items: Sequence[Text]

    def markdown(self) -> str:
        return "\n".join(md_bullets(self.items))

    def html(self) -> str:
        return "<ul>" + "".join(f"<li>{inline_html(item)}</li>" for item in self.items) + "</ul>"


@dataclass(frozen=True)
class Table:
    """A table. ``head`` None: no head row in HTML and an empty one in Markdown (which needs one); with
    ``row_headers`` each row's first cell is a ``<th>`` (a summary of names and values); ``anchors`` are ids
    that links elsewhere in the page point to (HTML only)."""

    head: Sequence[Cell] | None
    rows: Sequence[Sequence[Cell]]
    row_headers: bool = False
    anchors: Sequence[str] = ()

    def markdown(self) -> str:
        head = self.head if self.head is not None else [""] * (len(self.rows[0]) if self.rows else 0)
        return "\n".join(md_table(head, self.rows)) if head else ""

    def html(self) -> str:
        marks = "".join(f'<span id="{escape(anchor)}"></span>' for anchor in self.anchors)
        top = "" if self.head is None else "<tr>" + "".join(f"<th>{html_cell(h)}</th>" for h in self.head) + "</tr>"
        body = ["<tr>" + "".join(f"<th>{html_cell(c)}</th>" if self.row_headers and i == 0 else
                                 f"<td>{html_cell(c)}</td>" for i, c in enumerate(row)) + "</tr>" for row in self.rows]
        return f"{marks}<table>{top}{''.join(body)}</table>"


@dataclass(frozen=True)
class Preformatted:
    """Text kept as it is, in a monospace block: a fenced code block; ``<pre>``."""

    text: str

    def markdown(self) -> str:
        fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", self.text)), default=0))
        return f"{fence}\n{self.text}\n{fence}"

    def html(self) -> str:
        return f"<pre>{escape(self.text)}</pre>"


@dataclass(frozen=True)
class Figure:
    """A PNG beside the report: ``![alt](file)`` in Markdown, embedded as base64 in HTML (the page needs no
    file beside it); ``alt`` defaults to the file's stem. With a ``title`` or ``caption`` it is its own
    subsection in Markdown (``### title``, the image, the caption) and a ``<figure>`` in HTML."""

    path: Path
    alt: str = ""
    title: Text = ""
    caption: Text = ""
    id: str = ""

    def markdown(self) -> str:
        image = f"![{self.alt or self.path.stem}]({self.path.name})"
        return "\n\n".join(part for part in (self.title and f"### {self.title}", image, self.caption) if part)

    def html(self) -> str:
        data = base64.b64encode(Path(self.path).read_bytes()).decode()
        attr = f' id="{escape(self.id)}"' if self.id else ""
        image = f'<img alt="{escape(self.alt or self.path.stem)}" src="data:image/png;base64,{data}">'
        if not (self.title or self.caption):
            return image.replace("<img", f"<img{attr}", 1)
        title = f"<b>{inline_html(self.title)}</b>" + (": " if self.caption else "") if self.title else ""
        return f"<figure{attr}>{image}<figcaption>{title}{inline_html(self.caption)}</figcaption></figure>"


@dataclass(frozen=True)
class Figures:
    """Figures side by side: in Markdown bare images on consecutive lines (one paragraph), titled ones one
    after another; in HTML a wrapping row."""

    items: Sequence[Figure]

    def markdown(self) -> str:
        bare = all(not (f.title or f.caption) for f in self.items)
        return ("\n" if bare else "\n\n").join(f.markdown() for f in self.items)

    def html(self) -> str:
        return '<div class="figures">' + "".join(f.html() for f in self.items) + "</div>"


Block = Heading | Paragraph | Bullets | Table | Preformatted | Figure | Figures


def markdown(blocks: Sequence[Block]) -> str:
    """Blocks as Markdown, one blank line between two (a block with no Markdown form left out)."""
    return "\n\n".join(text for text in (block.markdown() for block in blocks) if text)


@dataclass
class Page:
    """A report as one structure, written as Markdown and as a self-contained HTML page from the same
    blocks: every heading, paragraph, list and table cell is in both files."""

    title: Text
    blocks: list[Block] = field(default_factory=list)

    def to_markdown(self) -> str:
        return markdown([Heading(self.title, 1), *self.blocks]) + "\n"

    def to_html(self) -> str:
        """The house style, the escaped title as ``<title>`` and ``<h1>``, the blocks."""
        body = "\n".join(block.html() for block in self.blocks)
        return (f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{escape(self.title)}</title>'
                f"<style>{STYLE}</style></head><body>\n{Heading(self.title, 1).html()}\n{body}\n</body></html>\n")

    def write(self, folder: Path, stem: str) -> tuple[Path, Path]:
        """``folder/stem.md`` and ``folder/stem.html``, each written atomically; returns both paths."""
        paths = Path(folder) / f"{stem}.md", Path(folder) / f"{stem}.html"
        write_text_atomic(paths[0], self.to_markdown())
        write_text_atomic(paths[1], self.to_html())
        return paths


# --- plots -----------------------------------------------------------------------------------------------

def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (files only, no display), after checking matplotlib's floor."""
    matplotlib = import_optional("matplotlib", "report", "this report's figures", PdbgymError)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional: matplotlib (pdbgym[report])

    return plt
