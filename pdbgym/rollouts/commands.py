"""`pdbgym cache ...` commands: validate, summary, convert (``build`` is added beside them)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from pdbgym.commandapp import command_app
from pdbgym.fileio import json_safe
from pdbgym.progress import progress
from pdbgym.rollouts.summary import CacheSummary

app = command_app(no_args_is_help=True)
console = Console()

CacheDirArg = Annotated[
    Path | None,
    typer.Argument(help="Cache folder (or its manifest.json), or a single .parquet cache; default: $KL_EVAL_TEACHER_CACHE_DIR"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables")]


@contextmanager
def file_progress(verb: str, enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """Progress on stderr fed by ``on_file(files_started, files_total)`` callbacks (``pdbgym.progress``)."""
    with progress(Console(stderr=True), disable=not enabled, transient=True) as bars:
        bar = bars.add_task(verb, total=None)

        seen = {"total": 0}

        def on_file(started: int, total: int) -> None:
            seen["total"] = total
            bars.update(bar, completed=started, total=total)

        yield on_file
        bars.update(bar, completed=seen["total"])  # the callbacks count files started; now all are done


@app.command("validate")
def validate_command(
    cache_dir: CacheDirArg = None,
    vocab_size: Annotated[
        int | None, typer.Option("--vocab-size", help="Scoring model's vocab: token ids must be below it")
    ] = None,
    show: Annotated[int, typer.Option("--show", help="Problems printed per kind (all with --json)")] = 40,
    as_json: JsonOpt = False,
) -> None:
    """Check every record and the manifest; exit 1 when there are errors (warnings do not fail)."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.rollouts.cache import resolve_cache_source
    from pdbgym.rollouts.validate import validate_cache_report

    folder = resolve_cache_source(cache_dir)
    with file_progress("validating", enabled=not as_json) as on_file:
        report = validate_cache_report(folder, vocab_size=vocab_size, on_file=on_file)
    if as_json:
        print(json.dumps({"cache_dir": str(folder), "ok": report.ok, "errors": report.errors,
                          "warnings": report.warnings}, indent=2))
    else:
        for kind, problems in (("[red]error[/]  ", report.errors), ("[yellow]warning[/]", report.warnings)):
            for problem in problems[:show]:
                console.print(f"{kind} {problem}", highlight=False, soft_wrap=True)
            if len(problems) > show:
                console.print(f"{kind} ... and {len(problems) - show} more (--show N or --json for all)")
        verdict = "[green]valid[/]" if report.ok else f"[red]{len(report.errors)} error(s)[/]"
        console.print(f"{folder}: {verdict}, {len(report.warnings)} warning(s)")
    if not report.ok:
        raise typer.Exit(1)


@app.command("summary")
def summary_command(cache_dir: CacheDirArg = None, as_json: JsonOpt = False) -> None:
    """Instances, samples, tokens, masked tokens, solve rate and how episodes ended."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.rollouts.cache import resolve_cache_source
    from pdbgym.rollouts.summary import summarize_cache

    folder = resolve_cache_source(cache_dir)
    with file_progress("reading", enabled=not as_json) as on_file:
        summary = summarize_cache(folder, on_file=on_file)
    if as_json:
        print(json.dumps(json_safe({"cache_dir": str(folder), **summary.to_dict()}), indent=2))
        return
    console.print(_summary_table(folder, summary))


def _summary_table(folder: Path, summary: CacheSummary) -> Table:
    """The cache summary as a two-column table (what, value)."""
    table = Table(title=f"teacher cache {folder}", show_header=False)
    table.add_column("what")
    table.add_column("value")

    def share(value: float) -> str:  # an empty cache has no rates: say so rather than print nan%
        return "n/a" if value != value else f"{value:.1%}"

    rows = [
        ("datasets", ", ".join(f"{name} ({count})" for name, count in summary.datasets.items()) or "-"),
        ("instances", f"{summary.instances}"),
        ("samples", f"{summary.samples}"),
        ("tokens (prompt + response)", f"{summary.total_tokens:,} ({summary.prompt_tokens:,} + "
                                       f"{summary.response_tokens:,})"),
        ("masked tokens (loss_mask == 1)", f"{summary.masked_tokens:,} ({share(summary.masked_fraction)} of response)"),
        ("longest sequence", f"{summary.max_sequence_tokens:,} tokens"),
        ("solve rate (reward == 1)", f"{share(summary.solve_rate)} ({summary.solved_samples}/{summary.samples}); "
                                     f"{summary.instances_solved} instance(s) solved at least once"),
        ("mean log-prob, masked", f"{summary.mean_masked_log_prob:.4f} nats/token"),
        ("terminations", summary.termination_line()),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


@app.command("convert")
def convert_command(
    source: Annotated[Path, typer.Argument(help="Cache folder, .parquet file or single .pt file")],
    destination: Annotated[Path, typer.Argument(help="X.parquet for one Parquet file, else a cache folder")],
    fmt: Annotated[str, typer.Option("--format", help="File format inside a destination folder: pt or parquet")]
    = "pt",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing destination")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Copy a cache between .pt and Parquet, then read the copy back and check it bit for bit."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.rollouts.convert import convert_cache

    result = convert_cache(source, destination, fmt=fmt, overwrite=overwrite)
    if as_json:
        print(json.dumps({"source": str(result.source), "destination": str(result.destination),
                          "records": result.records, "verified": result.verified}))
        return
    console.print(f"wrote {result.records} record(s) to {result.destination}; read back and verified identical")


@app.command("repair")
def repair_command(
    cache_dir: Annotated[Path, typer.Argument(help="Cache folder whose manifest.json is missing or corrupted")],
    as_json: JsonOpt = False,
) -> None:
    """Rebuild manifest.json from the cache's instance files (the old one kept as manifest.json.bad)."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.rollouts.cache import repair_manifest

    entries, kept = repair_manifest(cache_dir)
    if as_json:
        print(json.dumps({"cache_dir": str(cache_dir), "entries": len(entries), "old_manifest": str(kept) if kept else None}))
        return
    console.print(f"{cache_dir}: manifest rebuilt, {len(entries)} instance file(s) listed"
                  + (f"; the old one is {kept}" if kept else "") + f"; check it with `pdbgym cache validate {cache_dir}`")
