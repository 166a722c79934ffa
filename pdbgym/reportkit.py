"""The pieces every report is built from: number formats, Markdown and HTML tables, embedded plots, the page.

The training reports (``train/report.py``, GRPO's and the experiment's), the campaign report
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
- HTML: every string is escaped; only a cell or fragment wrapped in :class:`Html` passes through as markup.
- Markdown: a cell's pipes are escaped (``\\|``) and its newlines become spaces, so a table keeps its columns.
- Plots are PNG files drawn by matplotlib's Agg backend (:func:`pyplot`); the HTML page embeds them as
  base64 (:func:`img`) so it stands alone, the Markdown links the files beside it.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TypedDict

from pdbgym.errors import PdbgymError
from pdbgym.versions import import_optional

NA = "n/a"
EMPTY = "-"
NATS = ".4f"
DIFF = "+.4f"
PCT_POINTS = ".1f"
PCT_DIFF = "+.1f"
CORR = ".2f"
STYLE = ("body{font-family:sans-serif;max-width:72em;margin:2em auto;padding:0 1em}"
         "table{border-collapse:collapse;margin:1em 0}"
         "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;vertical-align:top}")


class Html(str):
    """Markup already written as HTML (a link with a class, a fragment built from escaped parts): a table
    cell or list item of this type is put into the page as it is."""


@dataclass(frozen=True)
class Link:
    """A table cell that links to a file, folder or anchor, ``href`` relative to the report's folder."""

    text: str
    href: str
    css_class: str = ""


Cell = str | int | float | Link | Sequence[Link] | None
"""What a table cell holds: text (``Html`` is text kept as markup), a number (a float to five significant
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


# --- HTML ------------------------------------------------------------------------------------------------

def escape(value: object) -> str:
    """``value`` as text safe in HTML content and in a quoted attribute."""
    return html.escape(str(value))


def html_cell(value: Cell) -> str:
    """An HTML table cell's content: :class:`Html` as it is, links as ``<a>``, anything else escaped."""
    if isinstance(value, Html):
        return str(value)
    if isinstance(value, Link):
        css = f' class="{escape(value.css_class)}"' if value.css_class else ""
        return f'<a{css} href="{escape(value.href)}">{escape(value.text)}</a>'
    if _links(value):
        return " ".join(html_cell(v) for v in value)
    return escape(cell(value))


def html_table(head: Sequence[Cell] | None, rows: Sequence[Sequence[Cell]], *, id: str = "",
               row_headers: bool = False) -> str:
    """A ``<table>``: ``head`` as its first row of ``<th>`` (none when None); with ``row_headers`` each
    row's first cell is a ``<th>`` too (a two-column summary of name and value)."""
    attr = f' id="{escape(id)}"' if id else ""
    top = "<tr>" + "".join(f"<th>{html_cell(h)}</th>" for h in head) + "</tr>" if head is not None else ""
    body = []
    for row in rows:
        cells = [f"<th>{html_cell(c)}</th>" if row_headers and i == 0 else f"<td>{html_cell(c)}</td>"
                 for i, c in enumerate(row)]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table{attr}>{top}{''.join(body)}</table>"


def html_list(items: Sequence[str]) -> str:
    """A ``<ul>``, each item escaped unless it is :class:`Html`."""
    return "<ul>" + "".join(f"<li>{html_cell(i) if isinstance(i, Html) else escape(i)}</li>" for i in items) + "</ul>"


def img(path: Path, alt: str = "", id: str = "") -> Html:
    """An ``<img>`` holding the PNG at ``path`` as base64 (the page needs no file beside it); ``alt``
    defaults to the file's stem."""
    data = base64.b64encode(Path(path).read_bytes()).decode()
    attr = f' id="{escape(id)}"' if id else ""
    return Html(f'<img{attr} alt="{escape(alt or Path(path).stem)}" src="data:image/png;base64,{data}">')


def page(title: str, body: str, style: str = "") -> str:
    """A self-contained HTML page: the house style (plus ``style``), the escaped title as ``<h1>``, ``body``."""
    return (f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{STYLE}{style}</style></head><body>\n<h1>{escape(title)}</h1>\n{body}\n</body></html>\n")


# --- plots -----------------------------------------------------------------------------------------------

def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend (files only, no display), after checking matplotlib's floor."""
    matplotlib = import_optional("matplotlib", "report", "this report's figures", PdbgymError)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional: matplotlib (pdbgym[report])

    return plt
