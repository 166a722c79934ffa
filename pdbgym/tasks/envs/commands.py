"""`pdbgym envs list|build|prune`: task environments in the cache, with their disk use."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pdbgym.progress import progress

app = typer.Typer(no_args_is_help=True)
console = Console()
err_console = Console(stderr=True)


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
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of lines")] = False,
) -> None:
    """Build (or find in the cache) each distinct environment of the tasks or the requirements given."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.sandbox import pyenv
    from pdbgym.tasks.suites import resolve_tasks

    wanted: dict[str, list[str]] = {}
    if requirement:
        normalized = pyenv.check_requirements(requirement)
        wanted[pyenv.environment_key(normalized)] = normalized
    for task in resolve_tasks(spec) if spec else []:
        if task.requirements:
            normalized = pyenv.check_requirements(task.requirements, f"task {task.instance_id!r}: ")
            wanted.setdefault(pyenv.environment_key(normalized), normalized)
    if not wanted:
        raise typer.BadParameter("nothing to build: give tasks that declare requirements, or --requirement")
    rows = []
    with progress(err_console, disable=as_json) as bars:
        bar = bars.add_task("environments", total=len(wanted))
        for key, requirements in wanted.items():
            def said(line: str, key: str = key) -> None:
                bars.update(bar, description=f"{key[:8]}: {line.strip()[:70]}")

            cached = pyenv.read_environment(pyenv.envs_home() / key) is not None
            info = pyenv.ensure_environment(requirements, on_line=said)
            rows.append({"key": info.key, "requirements": info.requirements, "bytes": info.bytes, "cached": cached,
                         "build_s": 0.0 if cached else info.build_s, "path": str(info.path)})
            bars.update(bar, advance=1, description="environments")
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        how = "cached" if row["cached"] else f"built in {row['build_s']:.1f} s"
        console.print(f"{row['key']}  {_mib(row['bytes'])}  {how}  "
                      f"{escape(' '.join(row['requirements']))}", highlight=False)


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
