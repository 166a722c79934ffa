"""`pdbgym tasks ...` commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import TaskID
from rich.table import Table

from pdbgym.commandapp import command_app
from pdbgym.progress import progress
from pdbgym.tasks.report import Outcome, print_outcomes, print_whole

app = command_app(no_args_is_help=True)
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
    from the failing test to the fix, whether the statement names the fix's site) and rung, then how many
    tasks sit on each rung, per source and in all."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.difficulty import RUNGS, ladder
    from pdbgym.tasks.suites import resolve_tasks

    data = ladder(resolve_tasks(spec))
    if as_json:
        print(json.dumps(data, indent=2))
        return
    columns = ("patch_lines", "files", "hunks", "oracle_actions", "fix_distance", "site_named", "rung")
    if not summary:
        table = Table(title=f"demands of {data['total']} task(s) in {spec}")
        table.add_column("instance_id", no_wrap=True)  # an id is copied into other commands: never cut
        for column in columns:
            table.add_column(column, justify="right")
        for row in data["tasks"]:
            values = (row["patch_lines"], row["files"], row["hunks"], row["oracle_actions"], row["fix_distance"],
                      row["site_named"], row["rung"])  # in the order of ``columns``
            table.add_row(row["instance_id"], *(str(value) for value in values))
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
        bar: list[TaskID] = []  # the phase starts once the tasks are found: a spec that does not resolve prints none
        reports = validate_spec(spec, sandbox=box, workers=workers or None, check_debugger=not no_debugger,
                                on_done=lambda _r: bars.advance(bar[0]),
                                on_total=lambda total: bar.append(bars.add_task("validating", total=total)))
    if as_json:
        print(json.dumps([r.to_dict() for r in reports], indent=2))
    else:
        outcomes = [Outcome(r.instance_id, r.ok, "\n".join(r.problems), {"seconds": f"{r.duration_s:.1f}"})
                    for r in reports]
        print_outcomes(console, f"validation of {spec} ({box.name} sandbox)", outcomes, what="tasks valid",
                       detail_column="problems")
    if any(not r.ok for r in reports):
        raise typer.Exit(1)


def import_swebench_command(
    jsonl: Annotated[Path, typer.Argument(help="SWE-bench / SWE-Gym / SWE-smith JSONL (FAIL_TO_PASS/PASS_TO_PASS "
                                               "lists or JSON strings).")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write task folders into.")],
    mirrors: Annotated[Path | None, typer.Option(
        "--mirrors", file_okay=False, exists=True,
        help="Folder of git repositories (bare or not) at OWNER/NAME, OWNER/NAME.git, OWNER__NAME or "
             "OWNER__NAME.git, for rows giving 'repo' and 'base_commit'. A repository not found there is "
             "cloned into $PDBGYM_HOME/repos.")] = None,
    no_clone: Annotated[bool, typer.Option("--no-clone", help="Never clone: a repository not in --mirrors (or "
                                                                "the clone cache) fails its rows.")] = False,
    repos: Annotated[Path | None, typer.Option(
        "--repos", help="Folder holding <instance_id>/ checkouts for rows without repo_path.")] = None,
    build_envs: Annotated[bool, typer.Option("--build-envs", help="Build each task's environment now (its "
                                                                  "'requirements'); a row that fails is reported.")] = False,
    derive: Annotated[bool, typer.Option(
        "--derive-requirements/--no-derive-requirements",
        help="A row without 'requirements' gets the project's declared runtime and test dependencies at its "
             "commit, pinned for this Python (binary wheels); off, the runner alone.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print per-row outcomes as JSON.")] = False,
) -> None:
    """Turn SWE-bench-style JSONL rows into task folders; every row is tried, and a table ends the run.
    Exit status 1 when any row failed."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.swebench import import_swebench

    with progress(Console(stderr=True), disable=as_json) as bars:
        bar = bars.add_task("importing rows", total=None)
        outcomes = import_swebench(jsonl, out, repos, build_environments=build_envs, mirrors=mirrors,
                                   clone=not no_clone, on_done=lambda _o: bars.advance(bar),
                                   derive_requirements=derive)
    if as_json:
        print(json.dumps([{"line": o.line, "instance_id": o.instance_id, "task_dir": str(o.task_dir or ""),
                           "origin": o.origin, "error": o.error} for o in outcomes]))
    else:
        rows = [Outcome(o.instance_id, not o.error, o.error or f"{o.task_dir}  (from {o.origin})",
                        {"line": str(o.line)}) for o in outcomes]
        print_outcomes(console, f"import of {jsonl} into {out}", rows, what="rows imported", ok_word="imported")
    if any(o.error for o in outcomes):
        raise typer.Exit(1)


def _mount_synthesis() -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.synth.commands import register

    register(app)


def _mount_swebench_import() -> None:
    """``import-swebench``: rows as published (repo + base_commit) or with a local checkout."""
    app.command("import-swebench", help="Turn SWE-bench-style JSONL rows (repo + base_commit, or a local "
                                        "checkout) into pdbgym task folders.")(import_swebench_command)


_mount_synthesis()
_mount_swebench_import()
