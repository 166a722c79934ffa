"""`pdbgym tasks ...` commands."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from pdbgym.progress import progress

app = typer.Typer(no_args_is_help=True)
console = Console()

SpecArg = Annotated[str, typer.Argument(help="A suite (builtin, regression), a task id, or a folder of tasks")]


@app.command("list")
def list_command(
    spec: SpecArg = "builtin",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False,
) -> None:
    """List tasks with their bug class, difficulty and test counts."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.suites import resolve_tasks

    tasks = resolve_tasks(spec)
    if as_json:
        print(json.dumps([{**t.to_json(), "path": str(t.path)} for t in tasks], indent=2))
        return
    table = Table(title=f"{len(tasks)} task(s) in {spec}")
    table.add_column("instance_id", no_wrap=True)  # an id is copied into other commands: never cut
    for column in ("bug_class", "difficulty", "FAIL_TO_PASS", "PASS_TO_PASS", "split"):
        table.add_column(column)
    for t in tasks:
        table.add_row(t.instance_id, t.bug_class or "-", t.difficulty or "-", str(len(t.FAIL_TO_PASS)),
                      str(len(t.PASS_TO_PASS)), t.split or "-")
    print_whole(table, console)



@app.command("ladder")
def ladder_command(
    spec: SpecArg = "builtin",
    summary: Annotated[bool, typer.Option("--summary", help="Print only the per-rung counts, not every task")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON: every task's demands and rung, and the counts")] = False,
) -> None:
    """The task ladder of a task set: each task's demands (patch lines, files, hunks, oracle actions, distance
    from the failing test to the fix) and rung, then how many tasks sit on each rung, per source and in all."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.difficulty import RUNGS, ladder
    from pdbgym.tasks.suites import resolve_tasks

    data = ladder(resolve_tasks(spec))
    if as_json:
        print(json.dumps(data, indent=2))
        return
    columns = ("patch_lines", "files", "hunks", "oracle_actions", "fix_distance", "rung")
    if not summary:
        table = Table(title=f"demands of {data['total']} task(s) in {spec}")
        table.add_column("instance_id", no_wrap=True)  # an id is copied into other commands: never cut
        for column in columns:
            table.add_column(column, justify="right")
        for row in data["tasks"]:
            table.add_row(row["instance_id"], *(str(row[c]) for c in columns))
        print_whole(table, console)
    counts = Table(title=f"tasks per rung in {spec}")
    counts.add_column("source", no_wrap=True)
    for level in RUNGS:
        counts.add_column(f"rung {level}", justify="right")
    counts.add_column("total", justify="right")
    for source, per_rung in data["by_source"].items():
        counts.add_row(source, *(str(per_rung[level]) for level in RUNGS), str(sum(per_rung.values())))
    counts.add_row("[bold]all[/]", *(str(data["rungs"][level]) for level in RUNGS), str(data["total"]))
    print_whole(counts, console)


def print_whole(renderable: Any, out: Console) -> None:
    """Print ``renderable`` uncut: on a terminal at its width, else (a pipe, a file) as wide as it needs.

    Piped output has no width to respect, and rich's default of 80 columns would cut table cells.
    """
    if out.is_terminal:
        out.print(renderable)
        return
    needed = out.measure(renderable, options=out.options.update_width(10_000)).maximum
    Console(file=out.file, width=max(out.width, needed), no_color=out.no_color).print(renderable)


@app.command("validate")
def validate_command(
    spec: SpecArg = "builtin",
    workers: Annotated[int, typer.Option(help="Tasks validated at once (0: one per core)")] = 0,
    no_debugger: Annotated[bool, typer.Option("--no-debugger", help="Skip the pdb-prompt check")] = False,
    sandbox: Annotated[str, typer.Option(help="auto, bwrap or plain")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON reports")] = False,
) -> None:
    """Check every task: FAIL_TO_PASS fail then pass with the patch, PASS_TO_PASS pass, pdb starts."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.sandbox import get_sandbox
    from pdbgym.tasks.validate import validate_spec

    box = get_sandbox(sandbox)
    with progress(Console(stderr=True), disable=as_json) as bars:
        bar = bars.add_task("validating", total=None)
        reports = validate_spec(spec, sandbox=box, workers=workers or None, check_debugger=not no_debugger,
                                on_done=lambda _r: bars.advance(bar),
                                on_total=lambda total: bars.update(bar, total=total))
    failed = [r for r in reports if not r.ok]
    if as_json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        table = Table(title=f"validation of {spec} ({box.name} sandbox)")
        for column in ("instance_id", "result", "seconds", "problems"):
            table.add_column(column)
        for r in reports:
            table.add_row(r.instance_id, "[green]ok[/]" if r.ok else "[red]FAIL[/]", f"{r.duration_s:.1f}",
                          "\n".join(r.problems) or "-")
        console.print(table)
        console.print(f"{len(reports) - len(failed)}/{len(reports)} tasks valid")
    if failed:
        raise typer.Exit(1)


def _mount_synthesis() -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.synth.commands import register

    register(app)


_mount_synthesis()
