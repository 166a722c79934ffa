"""CLI for task synthesis, splits and SWE-bench interchange; ``register`` adds them to ``pdbgym tasks``."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import TaskID
from rich.table import Table

console = Console()


def register(app: typer.Typer) -> None:
    """Add ``synth``, ``split``, ``family``, ``check-splits`` and ``export-swebench`` to ``app`` (``import-swebench``
    is ``pdbgym.tasks.commands``')."""
    app.command("synth", help="Synthesize validated bug tasks from a project folder or pypi:NAME==VERSION.")(synth_command)
    app.command("split", help="Split a folder of tasks into train/val/test without group leakage.")(split_command)
    app.command("family", help="Write a generated task family (the task ladder's low rungs).")(family_command)
    app.command("check-splits", help="Refuse a split file whose splits overlap (exit 1 naming the overlaps).")(
        check_splits_command)
    app.command("export-swebench", help="Write tasks as SWE-bench-style JSONL.")(export_swebench_command)


def synth_command(
    sources: Annotated[list[str], typer.Argument(help="Project folders and/or pypi:NAME==VERSION specs.")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write task folders into (state kept in OUT/.synth).")],
    max_tasks: Annotated[int, typer.Option("--max", min=1, help="Tasks to keep per source.")] = 20,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the candidate order; same seed, same tasks.")] = 0,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Parallel processes.")] = max(1, os.cpu_count() or 1),
    baseline_runs: Annotated[int, typer.Option("--baseline-runs", min=1, help="Clean-suite runs to find flaky tests.")] = 3,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Per-test timeout in seconds.")] = 5.0,
    operators: Annotated[str, typer.Option("--operators", help="Comma-separated operator names (default: all).")] = "",
    max_candidates: Annotated[int, typer.Option("--max-candidates", min=0, help="Stop after this many candidates (0: no cap).")] = 0,
    all_tests: Annotated[bool, typer.Option("--all-tests", help="Rerun the whole suite per candidate (slow baseline).")] = False,
    no_hot: Annotated[bool, typer.Option("--no-hot", help="Run every mutant from files, never in a collected session.")] = False,
    recheck_fixed: Annotated[bool, typer.Option("--recheck-fixed", help="Also rerun each kept task's tests on its patched repo.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the per-source report as JSON.")] = False,
) -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.interrupts import Interrupted
    from pdbgym.progress import progress
    from pdbgym.tasks.synth.engine import STATE_DIR, SynthConfig, synthesize_source

    config = SynthConfig(out=out, max_tasks=max_tasks, seed=seed, workers=workers, baseline_runs=baseline_runs,
                         per_test_timeout_s=timeout, operators=[o for o in operators.split(",") if o] or None,
                         select_tests="all" if all_tests else "covering", max_candidates=max_candidates or None,
                         hot_patch=not no_hot, recheck_fixed=recheck_fixed)
    out.mkdir(parents=True, exist_ok=True)
    reports = []
    with progress(Console(stderr=True), disable=as_json) as bars:
        for source in sources:
            bar = bars.add_task(f"{source}: preparing", total=None)

            def update(name: str, done: int, total: int, kept: int, bar: TaskID = bar) -> None:
                # The bar tracks kept tasks against --max: the candidate stream is far longer than needed.
                bars.update(bar, completed=min(kept, max_tasks), total=max_tasks,
                            description=f"{name}: {done} of {total} candidates tried, kept")

            try:
                reports.append(synthesize_source(source, config, update))
            except KeyboardInterrupt:
                written = sum(len(r.task_ids) for r in reports)
                raise Interrupted(
                    f"interrupted during {source}: {written} task(s) of the sources before it are in {out}; the "
                    f"candidates {source} had tried are kept in {out / STATE_DIR}; rerun the same command to resume "
                    "(the same tasks come out)") from None
            bars.update(bar, description=f"{source}: done")
    _write_report(out, reports)
    if as_json:
        print(json.dumps([asdict(r) for r in reports], indent=2))
    else:
        _print_reports(reports)
    if all(r.error for r in reports):
        raise typer.Exit(1)


def _write_report(out: Path, reports: list) -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.fileio import write_json_atomic

    write_json_atomic(out / "synth_report.json", [asdict(r) for r in reports], indent=2)


def _print_reports(reports: list) -> None:
    table = Table(title="Task synthesis")
    for column in ("source", "tried", "kept", "yield", "tests", "statuses / error"):
        table.add_column(column)
    for r in reports:
        if r.error:
            table.add_row(r.source, "-", "-", "-", "-", f"[red]{r.error[:300]}[/]")
            continue
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(r.statuses.items()))
        table.add_row(r.source, str(r.tried), str(r.kept), f"{r.kept / max(r.tried, 1):.1%}",
                      f"{r.tests_passing} (+{r.tests_excluded} excluded)", statuses)
    console.print(table)
    for r in reports:
        if r.per_operator:
            ops = Table(title=f"{r.source}: per operator")
            ops.add_column("operator")
            ops.add_column("tried")
            ops.add_column("kept")
            for name, counts in sorted(r.per_operator.items()):
                ops.add_row(name, str(counts.get("tried", 0)), str(counts.get("kept", 0)))
            console.print(ops)


def family_command(
    name: Annotated[str, typer.Argument(help="Family: ladder0 (rung 0), ladder1 (rung 1) or symptom (rung 1: the bug told by its symptom alone).")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write the task folders into.")],
    count: Annotated[int, typer.Option("--count", min=1, help="Tasks to write.")] = 50,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the variants; same seed, same tasks.")] = 0,
) -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.families import write_family

    folders = write_family(name, count, out, seed)
    console.print(f"wrote {len(folders)} {name} task(s) to {out}; check them with `pdbgym tasks validate {out}`")


def split_command(
    task_dir: Annotated[Path, typer.Argument(help="Folder of task folders (or a suite name).")],
    out: Annotated[Path, typer.Option("--out", help="Split file to write (JSON).")],
    val: Annotated[float, typer.Option("--val", help="Fraction of tasks for the val split.")] = 0.3,
    test: Annotated[float, typer.Option("--test", help="Fraction of tasks for the test split.")] = 0.0,
    group_by: Annotated[str, typer.Option("--group-by", help="Unit kept within one split: source-module, function, source or task.")] = "source-module",
    seed: Annotated[int, typer.Option("--seed", help="Seed for dealing groups to splits.")] = 0,
    stratify: Annotated[str | None, typer.Option("--stratify", help="'rung': each split gets its share of every rung of the task ladder.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print split sizes as JSON.")] = False,
) -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.splits import check_splits, make_splits, split_warnings, write_splits

    data = make_splits(task_dir, val, test, group_by, seed, stratify)
    overlaps = check_splits(data["splits"])
    if overlaps:  # grouping by module/function can still leave duplicate content; never write such a file
        _print_overlaps(overlaps)
        raise typer.Exit(1)
    write_splits(data, out)
    sizes = {name: len(items) for name, items in data["splits"].items()}
    groups = {name: len({i["group"] for i in items}) for name, items in data["splits"].items()}
    warnings = split_warnings(data)
    if as_json:
        print(json.dumps({"out": str(out), "tasks": sizes, "groups": groups, "warnings": warnings}))
        return
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    table = Table(title=f"splits by {group_by} -> {out}")
    for column in ("split", "tasks", "groups"):
        table.add_column(column)
    for name in sizes:
        table.add_row(name, str(sizes[name]), str(groups[name]))
    console.print(table)


def _print_overlaps(overlaps: list) -> None:
    console.print(f"[bold red]{len(overlaps)} overlap(s) between splits:[/]")
    for overlap in overlaps:
        console.print(f"  - {overlap.describe()}")


def check_splits_command(
    split_file: Annotated[Path, typer.Argument(help="Split file written by `pdbgym tasks split`.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print overlaps as JSON.")] = False,
) -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.splits import check_splits, load_splits

    overlaps = check_splits(load_splits(split_file))
    if as_json:
        print(json.dumps({"ok": not overlaps, "overlaps": [asdict(o) for o in overlaps]}))
    elif overlaps:
        _print_overlaps(overlaps)
    else:
        console.print(f"[green]{split_file}: splits are disjoint[/] (ids, repo content, buggy files, functions)")
    if overlaps:
        raise typer.Exit(1)


def export_swebench_command(
    tasks: Annotated[str, typer.Argument(help="Suite name, task folder or folder of tasks.")],
    out: Annotated[Path, typer.Option("--out", help="JSONL file to write.")],
    lists: Annotated[bool, typer.Option("--lists", help="Write FAIL_TO_PASS/PASS_TO_PASS as lists, not JSON strings.")] = False,
) -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.tasks.suites import resolve_tasks
    from pdbgym.tasks.swebench import export_swebench

    count = export_swebench(resolve_tasks(tasks), out, lists_as_strings=not lists)
    console.print(f"wrote {count} rows to {out}")
