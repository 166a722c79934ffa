"""`pdbgym divergence`: KL/JSD of one or more students against a teacher cache."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pdbgym.errors import PdbgymError

# Wide enough for the comparison table when stdout is a file or pipe (rich would assume 80 columns).
console = Console() if sys.stdout.isatty() else Console(width=200)


def explicit_semantics(temperature: float | None, top_p: float | None, renormalized: bool | None):
    """The transform stated on the command line, or None when no option states one."""
    from pdbgym.divergence.semantics import SEMANTICS_HELP, SemanticsError
    from pdbgym.rollouts.record import LogprobSemantics

    if temperature is None:
        if top_p is not None or renormalized is not None:
            raise SemanticsError("--top-p/--renormalized need --temperature too (the cached log-probs' T)")
        return None
    if top_p is not None and top_p < 1.0 and renormalized is None:
        raise SemanticsError(
            "with --top-p below 1, say whether the cached log-probs were renormalized over the nucleus: "
            "--renormalized or --no-renormalized.\n" + SEMANTICS_HELP
        )
    if renormalized and top_p is None:
        raise SemanticsError("--renormalized needs --top-p P (the nucleus mass the log-probs were renormalized to)")
    return LogprobSemantics(engine="cli", temperature=temperature, top_p=1.0 if top_p is None else top_p,
                            top_p_renormalized=bool(renormalized))


def load_records(cache: Path | None, max_records: int | None):
    from pdbgym.rollouts.cache import read_cache, resolve_cache_dir
    from pdbgym.rollouts.validate import validate_cache_report

    folder = resolve_cache_dir(cache)
    report = validate_cache_report(folder)
    if not report.ok:
        listed = "\n  ".join(report.errors[:10])
        raise PdbgymError(f"the cache {folder} is not valid ({len(report.errors)} error(s)):\n  {listed}\n"
                          f"run `pdbgym cache validate {folder}` for the full list")
    records = read_cache(folder)
    if max_records is not None:
        if max_records < 1:
            raise PdbgymError(f"--max-records must be >= 1, got {max_records}")
        records = records[:max_records]
    if not records:
        raise PdbgymError(f"the cache {folder} holds no records")
    return folder, records


def divergence_command(
    student: Annotated[list[str], typer.Option("--student", help="Student model folder or .gguf (repeat)")],
    json_out: Annotated[Path, typer.Option("--json", help="Write the report JSON here ('-' for stdout)")],
    cache: Annotated[Path | None, typer.Option(help="Cache folder; default $KL_EVAL_TEACHER_CACHE_DIR")] = None,
    teacher: Annotated[str | None, typer.Option(help="Teacher model path, or http(s) URL of a completions server")] = None,
    server_model: Annotated[str, typer.Option(help="Model name to send to a teacher server")] = "teacher",
    temperature: Annotated[float | None, typer.Option(help="T of the cached log-probs, when the cache does not say")] = None,
    top_p: Annotated[float | None, typer.Option(help="Nucleus mass of the cached log-probs")] = None,
    renormalized: Annotated[bool | None, typer.Option("--renormalized/--no-renormalized",
                                                      help="Cached log-probs renormalized over the nucleus?")] = None,
    max_records: Annotated[int | None, typer.Option(help="Score only the first N records")] = None,
    device: Annotated[str | None, typer.Option(help="cuda, cuda:1, cpu; default cuda if available")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG comparison plot here")] = None,
    student_samples: Annotated[bool, typer.Option("--student-samples/--no-student-samples",
                                                  help="With --teacher: sample students for KL(S||T), JSD")] = True,
    max_new_tokens: Annotated[int, typer.Option(help="Length limit of student samples (tokens)")] = 512,
    noise_floor: Annotated[bool, typer.Option(help="Also score the teacher model against the cache")] = False,
    rescore_teacher: Annotated[bool, typer.Option(help="Use the teacher model's log-probs, not the cached")] = False,
    token_budget: Annotated[int, typer.Option(help="Padded tokens per forward batch")] = 4096,
    work_dir: Annotated[Path | None, typer.Option(help="Resume folder for partial results; default <json>.work")] = None,
    bootstrap: Annotated[int, typer.Option(help="Task-level bootstrap resamples")] = 2000,
    extreme_threshold: Annotated[float, typer.Option(help="|log-ratio| (nats) counted as extreme")] = 20.0,
    seed: Annotated[int, typer.Option(help="Seed of student sampling and the bootstrap")] = 0,
) -> None:
    """Score students on a teacher cache: KL(teacher||student) from the cache's samples; with --teacher,
    also KL(student||teacher) and JSD from student samples. Formulas: docs/metrics.md."""
    from pdbgym.divergence.pipeline import DivergenceRun, run_divergence
    from pdbgym.divergence.render import differences_table, plot_report, report_table, write_report
    from pdbgym.divergence.report import ReportConfig, build_report
    from pdbgym.divergence.scoring import ScoringConfig
    from pdbgym.divergence.semantics import describe, resolve_semantics

    folder, records = load_records(cache, max_records)
    semantics = resolve_semantics(records, explicit_semantics(temperature, top_p, renormalized))
    to_stdout = str(json_out) == "-"
    if work_dir is None and not to_stdout:
        work_dir = json_out.with_name(json_out.name + ".work")
    run = DivergenceRun(
        records=records, semantics=semantics, students=list(student), teacher=teacher, server_model=server_model,
        student_samples=student_samples, max_new_tokens=max_new_tokens, noise_floor=noise_floor,
        rescore_teacher=rescore_teacher, device=device, work_dir=work_dir, seed=seed,
        scoring=ScoringConfig(token_budget=token_budget, show_progress=not to_stdout),
    )
    scores = run_divergence(run)
    context = {"cache": str(folder), "n_records": len(records), "semantics": semantics.to_dict(),
               "teacher": teacher, "students": list(student)}
    report = build_report(scores, ReportConfig(extreme_threshold=extreme_threshold, n_resamples=bootstrap,
                                               seed=seed, context=context))
    if to_stdout:
        print(json.dumps(report, indent=1))
    else:
        write_report(report, json_out)
        console.print(f"scored under {describe(semantics)}")
        console.print(report_table(report))
        if len(scores) > 1:
            console.print(differences_table(report))
        console.print(f"report: {json_out}")
    if plot is not None:
        plot_report(report, plot)
        if not to_stdout:
            console.print(f"plot: {plot}")
