"""`pdbgym envs list|build|prune`: task environments in the cache, with their disk use."""

from __future__ import annotations

import json
from typing import Annotated, NotRequired, TypedDict

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import TaskID
from rich.table import Table

from pdbgym.commandapp import command_app
from pdbgym.errors import PdbgymError
from pdbgym.progress import TaskSet, progress
from pdbgym.tasks.report import Outcome, print_outcomes

app = command_app(no_args_is_help=True)
console = Console()
err_console = Console(stderr=True)


class EnvRow(TypedDict):
    """One environment of ``envs build``: its key, requirements and the tasks that need it; once built or found,
    its disk use, whether the cache had it, the seconds its build took and its folder; else the error."""

    key: str
    requirements: list[str]
    bytes: NotRequired[int]
    cached: NotRequired[bool]
    build_s: NotRequired[float]
    path: NotRequired[str]
    tasks: list[str]
    error: str


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


@app.command("list")
def list_command(as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False) -> None:
    """Every environment in the cache: its key, requirements, disk use and build time."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.sandbox.pyenv import envs_home, list_environments

    found = list_environments()
    if as_json:
        print(json.dumps([{"key": e.key, "path": str(e.path), "requirements": e.requirements, "runner": e.runner,
                           "python": e.python, "installer": e.installer, "build_s": e.build_s, "bytes": e.bytes,
                           "files": e.files} for e in found], indent=2))
        return
    table = Table(title=f"{len(found)} environment(s) in {envs_home()}, {_mib(sum(e.bytes for e in found))}")
    for column in ("key", "requirements", "disk", "files", "built in", "installer"):
        table.add_column(column, no_wrap=column != "requirements", overflow="fold", ratio=1 if column == "requirements" else None)
    for e in found:
        table.add_row(e.key, escape(", ".join(e.requirements) or "(runner only)"), _mib(e.bytes), str(e.files),
                      f"{e.build_s:.1f} s", e.installer)
    console.print(table)


@app.command("build")
def build_command(
    spec: Annotated[str | None, typer.Argument(help="Tasks whose environments to build: a suite, task id or folder")] = None,
    requirement: Annotated[list[str] | None, typer.Option(
        "--requirement", "-r", help="Build the environment of these pinned requirements (NAME==VERSION; repeat)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")] = False,
) -> None:
    """Build (or find in the cache) each distinct environment of the tasks or the requirements given.

    Every environment is tried even when one fails; a table of each task (built, cached, or why not) ends
    the run, and the exit status is 1 when any failed."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.sandbox import pyenv
    from pdbgym.tasks.suites import resolve_tasks_lenient

    wanted: dict[str, list[str]] = {}
    users: dict[str, list[str]] = {}  # environment key -> the tasks (or "-r ...") that need it
    broken: list[Outcome] = []
    runner_only: list[Outcome] = []  # nothing to build: listed so the table names every task
    if requirement:
        normalized = pyenv.check_requirements(requirement)
        wanted[pyenv.environment_key(normalized)] = normalized
        users[pyenv.environment_key(normalized)] = ["-r " + " ".join(normalized)]
    tasks, unloadable = resolve_tasks_lenient(spec) if spec else ([], [])
    broken += [Outcome(folder.name, False, str(exc), {"environment": "-"}) for folder, exc in unloadable]
    for task in tasks:
        if not task.requirements:
            runner_only.append(Outcome(task.instance_id, True, "no requirements: the test runner alone",
                                       {"environment": "-"}))
            continue
        try:
            normalized = pyenv.check_requirements(task.requirements, f"task {task.instance_id!r}: ")
        except PdbgymError as exc:
            broken.append(Outcome(task.instance_id, False, str(exc), {"environment": "-"}))
            continue
        key = pyenv.environment_key(normalized)
        wanted.setdefault(key, normalized)
        users.setdefault(key, []).append(task.instance_id)
    if not wanted and not broken:
        raise typer.BadParameter("nothing to build: give tasks that declare requirements, or --requirement")
    rows: list[EnvRow] = []
    with progress(err_console, disable=as_json) as bars:
        bar = bars.add_task("environments", total=len(wanted))
        for key, requirements in wanted.items():
            rows.append(_build_one(key, requirements, users[key], bars, bar))
            bars.update(bar, advance=1, description="environments")
    if as_json:
        unbuilt: list[EnvRow] = [{"key": "", "requirements": [], "tasks": [b.name], "error": b.detail} for b in broken]
        print(json.dumps(rows + unbuilt, indent=2))
    else:
        outcomes = broken + runner_only + [Outcome(user, not row["error"], _said(row), {"environment": row["key"][:12]})
                             for row in rows for user in row["tasks"]]
        print_outcomes(console, f"environments of {spec or 'the requirements given'}", outcomes,
                       what="tasks with their environment", name_column="task")
    if broken or any(row["error"] for row in rows):
        raise typer.Exit(1)


def _build_one(key: str, requirements: list[str], tasks: list[str], bars: TaskSet, bar: TaskID) -> EnvRow:
    """One environment built or found: its row for the report, with the error (installer's words) if any,
    so the next environment is still tried."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.sandbox import pyenv

    def said(line: str) -> None:
        bars.update(bar, description=f"{key[:8]}: {line.strip()[:70]}")

    cached = pyenv.read_environment(pyenv.envs_home() / key) is not None
    try:
        info = pyenv.ensure_environment(requirements, on_line=said)
    except PdbgymError as exc:
        return {"key": key, "requirements": requirements, "tasks": tasks, "error": str(exc)}
    return {"key": info.key, "requirements": info.requirements, "bytes": info.bytes, "cached": cached,
            "build_s": 0.0 if cached else info.build_s, "path": str(info.path), "tasks": tasks, "error": ""}


def _said(row: EnvRow) -> str:
    if row["error"]:
        return row["error"]
    how = "cached" if row.get("cached") else f"built in {row.get('build_s', 0.0):.1f} s"
    return f"{how}, {_mib(row.get('bytes', 0))}: {' '.join(row['requirements'])}"


@app.command("prune")
def prune_command(
    keep: Annotated[str | None, typer.Option(help="Keep the environments of these tasks (a suite, task id or folder)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be removed, remove nothing")] = False,
) -> None:
    """Remove cached environments (all, or all but those the --keep tasks use) and killed builds' leftovers."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.sandbox.pyenv import environment_key, list_environments, prune_environments
    from pdbgym.tasks.suites import resolve_tasks

    kept = {environment_key(t.requirements) for t in (resolve_tasks(keep) if keep else []) if t.requirements}
    if dry_run:
        removed = [e for e in list_environments() if e.key not in kept]
    else:
        removed = prune_environments(kept)
    verb = "would remove" if dry_run else "removed"
    for e in removed:
        console.print(f"{verb} {e.key}  {_mib(e.bytes)}  {escape(' '.join(e.requirements))}", highlight=False)
    console.print(f"{verb} {len(removed)} environment(s), {_mib(sum(e.bytes for e in removed))}; kept {len(kept)}")
