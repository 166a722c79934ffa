"""The closing report of commands that go through many tasks (import, environment builds, validation):
one table row per task, ok or the reason, so a user sees every failure at once and what to do about it
instead of a run that stopped at the first one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.table import Table

REPORT_WIDTH = 200  # piped reports: reasons of several hundred characters fold rather than make 600-column lines


@dataclass
class Outcome:
    """One task's line of the report: ``detail`` says what was done (ok) or why not and what to do."""

    name: str
    ok: bool
    detail: str = ""
    columns: dict[str, str] = field(default_factory=dict)  # extra columns, the same keys on every row


def outcome_table(title: str, outcomes: Sequence[Outcome], *, name_column: str = "instance_id",
                  ok_word: str = "ok", fail_word: str = "FAIL", detail_column: str = "detail") -> Table:
    """A table of ``outcomes``; their texts are escaped (an error quoting ``[x]`` is not rich markup)."""
    table = Table(title=title)
    table.add_column(name_column, no_wrap=True)  # an id is copied into other commands: never cut
    extra = list(outcomes[0].columns) if outcomes else []
    for column in extra:
        table.add_column(column)
    table.add_column("result", no_wrap=True)
    table.add_column(detail_column, overflow="fold")
    for outcome in outcomes:
        result = f"[green]{ok_word}[/]" if outcome.ok else f"[red]{fail_word}[/]"
        table.add_row(escape(outcome.name or "-"), *(escape(outcome.columns.get(c, "")) for c in extra), result,
                      escape(outcome.detail or "-"))
    return table


def print_outcomes(out: Console, title: str, outcomes: Sequence[Outcome], *, what: str,
                   name_column: str = "instance_id", ok_word: str = "ok", fail_word: str = "FAIL",
                   detail_column: str = "detail") -> int:
    """Print the table (``outcome_table``'s columns and words) and a closing count (``3/4 tasks valid``);
    returns how many failed."""
    failed = sum(not o.ok for o in outcomes)
    table = outcome_table(title, outcomes, name_column=name_column, ok_word=ok_word, fail_word=fail_word,
                          detail_column=detail_column)
    print_whole(table, out, widest=REPORT_WIDTH)
    out.print(f"{len(outcomes) - failed}/{len(outcomes)} {what}" + (f", {failed} failed" if failed else ""),
              highlight=False)
    return failed


def print_whole(renderable: RenderableType, out: Console, widest: int | None = None) -> None:
    """Print ``renderable`` uncut: on a terminal at its width, else (a pipe, a file) as wide as it needs,
    up to ``widest`` columns when given (then long texts fold onto more lines; ids never wrap).

    Piped output has no width to respect, and rich's default of 80 columns would cut table cells.
    """
    if out.is_terminal:
        out.print(renderable)
        return
    needed = out.measure(renderable, options=out.options.update_width(10_000)).maximum
    width = max(out.width, needed if widest is None else min(needed, widest))
    Console(file=out.file, width=width, no_color=out.no_color).print(renderable)
