"""`pdbgym divergence`: KL/JSD of one or more students against a teacher cache.

The command parses its flags into a ``DivergenceConfig`` (whose defaults the flags read), calls
``compare`` and prints or writes the report.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from pdbgym.defaults import defaults_of
from pdbgym.divergence.config import DivergenceConfig, DivergenceOutcome

# Wide enough for the comparison table when stdout is a file or pipe (rich would assume 80 columns).
console = Console() if sys.stdout.isatty() else Console(width=200)
D = defaults_of(DivergenceConfig)


def divergence_command(
    student: Annotated[list[str], typer.Option("--student", help="Student: a model folder, a .gguf, 'embedded', or an adapter-store name such as sft or rl (see pdbgym adapters list); repeat for several")],
    json_out: Annotated[Path, typer.Option("--json", help="Write the report JSON here ('-' for stdout)")],
    cache: Annotated[Path | None, typer.Option(help="Cache folder; default $KL_EVAL_TEACHER_CACHE_DIR")] = D.cache,
    teacher: Annotated[str | None, typer.Option(help="Teacher model path, or http(s) URL of a completions server")] = D.teacher,
    server_model: Annotated[str, typer.Option(help="Model name to send to a teacher server")] = D.server_model,
    temperature: Annotated[float | None, typer.Option(help="T of the cached log-probs, when the cache does not say")] = D.temperature,
    top_p: Annotated[float | None, typer.Option(help="Nucleus mass of the cached log-probs")] = D.top_p,
    renormalized: Annotated[bool | None, typer.Option("--renormalized/--no-renormalized",
                                                      help="Cached log-probs renormalized over the nucleus?")] = D.renormalized,
    max_records: Annotated[int | None, typer.Option(help="Score only the first N records")] = D.max_records,
    device: Annotated[str | None, typer.Option(help="cuda, cuda:1, cpu; default cuda if available")] = D.device,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG comparison plot here")] = None,
    student_samples: Annotated[bool, typer.Option("--student-samples/--no-student-samples",
                                                  help="With --teacher: sample students for KL(S||T), JSD")] = D.student_samples,
    max_new_tokens: Annotated[int, typer.Option(help="Length limit of student samples (tokens)")] = D.max_new_tokens,
    noise_floor: Annotated[bool, typer.Option(help="Also score the teacher model against the cache")] = D.noise_floor,
    rescore_teacher: Annotated[bool, typer.Option(help="Use the teacher model's log-probs, not the cached")] = D.rescore_teacher,
    token_budget: Annotated[int, typer.Option(help="Padded tokens per forward batch")] = D.token_budget,
    work_dir: Annotated[Path | None, typer.Option(help="Resume folder for partial results; default <json>.work")] = None,
    bootstrap: Annotated[int, typer.Option(help="Task-level bootstrap resamples")] = D.bootstrap,
    extreme_threshold: Annotated[float, typer.Option(help="|log-ratio| (nats) counted as extreme")] = D.extreme_threshold,
    seed: Annotated[int, typer.Option(help="Seed of student sampling and the bootstrap")] = D.seed,
    devices: Annotated[int, typer.Option(help="Data-parallel ranks: GPUs (one each) or CPU processes")] = D.devices,
    teacher_device_map: Annotated[str | None, typer.Option(help="'auto': spread a local teacher over all GPUs")] = D.teacher_device_map,
) -> None:
    """Score students on a teacher cache: KL(teacher||student) from the cache's samples; with --teacher,
    also KL(student||teacher) and JSD from student samples. Formulas: docs/metrics.md."""
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.divergence.compare import compare

    to_stdout = str(json_out) == "-"
    config = DivergenceConfig(
        students=list(student), cache=cache, teacher=teacher, server_model=server_model, temperature=temperature,
        top_p=top_p, renormalized=renormalized, max_records=max_records, device=device,
        student_samples=student_samples, max_new_tokens=max_new_tokens, noise_floor=noise_floor,
        rescore_teacher=rescore_teacher, token_budget=token_budget, bootstrap=bootstrap,
        extreme_threshold=extreme_threshold, seed=seed, show_progress=not to_stdout, devices=devices,
        teacher_device_map=teacher_device_map,
        work_dir=work_dir or (None if to_stdout else json_out.with_name(json_out.name + ".work")))
    outcome = compare(config)
    if outcome is not None:  # None: a torchrun rank other than 0
        _show(outcome, json_out, plot, to_stdout)


def _show(outcome: DivergenceOutcome, json_out: Path, plot: Path | None, to_stdout: bool) -> None:
    # the command's code loads when it runs: every other command starts without it
    from pdbgym.divergence.render import differences_table, plot_report, report_table, write_report
    from pdbgym.divergence.semantics import describe

    if to_stdout:
        print(json.dumps(outcome.report, indent=1))
    else:
        write_report(outcome.report, json_out)
        console.print(f"scored under {describe(outcome.semantics)}")
        console.print(report_table(outcome.report))
        if len(outcome.report["students"]) > 1:
            console.print(differences_table(outcome.report))
        console.print(f"report: {json_out}")
    if plot is not None:
        plot_report(outcome.report, plot)
        if not to_stdout:
            console.print(f"plot: {plot}")
